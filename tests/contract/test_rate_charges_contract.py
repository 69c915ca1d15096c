"""`report_cost`: a running attempt's rate charge corrected at once, fenced to its worker.

A correction up takes the difference now (later starts wait for it); down gives it
back as far as it is unspent; a worker that no longer holds the attempt changes nothing.
"""

from __future__ import annotations

import pytest

from tidegate import App, Rate
from tidegate.domain.clock import ShiftedClock
from tidegate.domain.model import CycleRequest

RATE = Rate(limit=10, per="1m", burst=5)  # one unit every 10 s after a burst of 5


def _claim(app: App, limit: int = 10) -> list[tuple[str, int]]:
    return [run.fence for run in app.store.cycle(CycleRequest("w1", ["api"], [], [], limit, 60)).claimed]


@pytest.fixture
def rated(app: App) -> App:
    app.queue("api", rate=RATE)
    for cost in (1, 4, 5):
        app.task(name=f"cost{cost}", queue="api", rate_cost=cost)(lambda: None)
    app.declare()
    return app


def test_a_cost_reported_higher_is_taken_at_once(rated: App, clock: ShiftedClock) -> None:
    store = rated.store
    rated.tasks["cost1"].submit()
    [fence] = _claim(rated)
    waiting = rated.tasks["cost1"].submit().id
    assert store.report_cost("w1", fence, 5) is True  # 4 more units: the burst is spent
    assert _claim(rated) == []
    clock.advance(11)
    assert [run_id for run_id, _ in _claim(rated)] == [waiting]


def test_a_cost_reported_lower_gives_the_difference_back(rated: App) -> None:
    store = rated.store
    rated.tasks["cost5"].submit()
    [fence] = _claim(rated)
    waiting = rated.tasks["cost4"].submit().id
    assert _claim(rated) == []  # the first took the whole burst
    assert store.report_cost("w1", fence, 1) is True  # 4 units back at once
    assert [run_id for run_id, _ in _claim(rated)] == [waiting]


def test_a_cost_reported_as_zero_is_as_if_never_charged(rated: App) -> None:
    store = rated.store
    rated.tasks["cost5"].submit()
    [fence] = _claim(rated)
    rated.tasks["cost5"].submit()
    assert store.report_cost("w1", fence, 0) is True
    assert len(_claim(rated)) == 1  # the whole burst again
    # reporting again corrects the corrected charge, not the first one
    assert store.report_cost("w1", fence, 0) is True


def test_only_the_attempts_worker_corrects_it(rated: App, clock: ShiftedClock) -> None:
    store = rated.store
    rated.tasks["cost5"].submit()
    [fence] = _claim(rated)
    rated.tasks["cost1"].submit()
    before = store.rate_states().states
    assert store.report_cost("someone-else", fence, 0) is False
    assert store.report_cost("w1", (fence[0], fence[1] + 1), 0) is False
    assert store.rate_states().states == before
    assert _claim(rated) == []
    store.cycle(CycleRequest("w1", ["api"], [fence], [], 0, 60))
    assert store.hand_back("w1", [fence]) == [fence[0]]  # it started: the charge stays
    assert store.report_cost("w1", fence, 0) is False  # no longer running
    assert store.rate_states().states == before
