"""`Reports.send_now`: an outcome written at once still reaches the store after its start, exactly once.

The start goes with the outcome if no turn took it; if the turn in flight
carries it, the outcome waits for that turn (never the next one); if the store
refuses, both go back for the next turn, the start ahead of anything else.
Signals, not timing: the test sees the sender blocked in its wait.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from tidegate.domain.model import CycleResult, Outcome, OutcomeKind
from tidegate.worker.reports import Reports

FENCE = ("run-1", 2)
OTHER = ("run-2", 1)
OUTCOME = Outcome(FENCE[0], FENCE[1], OutcomeKind.COMPLETED, result=6)


class Cycle:
    """A store cycle that records what it was sent (and refuses it when told to)."""

    def __init__(self, refuse: bool = False) -> None:
        self.calls: list[tuple[list[Any], list[Outcome]]] = []
        self.refuse = refuse

    def __call__(self, starts: list[Any], outcomes: list[Outcome]) -> CycleResult:
        self.calls.append((starts, outcomes))
        if self.refuse:
            raise ConnectionError("injected: the store is unreachable")
        return CycleResult([], [], [], None)


def test_a_start_no_turn_took_goes_with_the_outcome_and_leaves_the_buffer() -> None:
    woken: list[bool] = []
    reports = Reports(on_outcome=lambda: woken.append(True))
    reports.started(OTHER)
    reports.started(FENCE)
    cycle = Cycle()
    reports.send_now(OUTCOME, cycle)
    assert cycle.calls == [([FENCE], [OUTCOME])]
    assert reports.take() == ([OTHER], [])  # the other attempt's start is left for the turn
    assert woken == []  # nothing for the loop to send


def test_an_outcome_waits_for_the_turn_in_flight_that_carries_its_start() -> None:
    reports = Reports(on_outcome=lambda: None)
    reports.started(FENCE)
    assert reports.take() == ([FENCE], [])  # a turn is sending the start
    blocked = threading.Event()
    real_wait = reports._turn_ended.wait

    def wait(timeout: float | None = None) -> bool:
        blocked.set()
        return real_wait(timeout)

    reports._turn_ended.wait = wait  # type: ignore[method-assign]
    cycle = Cycle()
    sender = threading.Thread(target=reports.send_now, args=(OUTCOME, cycle))
    sender.start()
    assert blocked.wait(10), "send_now did not wait for the turn"
    assert cycle.calls == []
    reports.sent()  # the turn committed the start
    sender.join(10)
    assert not sender.is_alive()
    assert cycle.calls == [([], [OUTCOME])]


@pytest.mark.parametrize("turn_failed", [False, True])
def test_a_refused_outcome_goes_back_for_the_next_turn_after_its_start(turn_failed: bool) -> None:
    woken: list[bool] = []
    reports = Reports(on_outcome=lambda: woken.append(True))
    reports.started(FENCE)
    if turn_failed:  # a turn took the start and failed: it is put back, and so in front again
        starts, outcomes = reports.take()
        reports.put_back(starts, outcomes)
    reports.send_now(OUTCOME, Cycle(refuse=True))
    assert reports.take() == ([FENCE], [OUTCOME])
    assert woken == [True]  # the loop is woken to send them
