"""A snoozed attempt through the Store port, on both backends (issue 25, domain/snooze.py).

The run goes back to the queue, due after the delay on the store's clock; the
attempt is not charged (the budget grows by one, counted as a snooze) and the
next claim hands the worker the run's snooze count, which the cap reads.
"""

from __future__ import annotations

from tidegate.domain import events as history
from tidegate.domain.clock import ShiftedClock
from tidegate.domain.model import CycleRequest, Outcome, OutcomeKind, RunStatus
from tidegate.storage.port import Store

from .conftest import LEASE, QUEUE, claim, enqueue_one, start


def _snoozed(fence: tuple[str, int], delay: float, overloaded: bool = False) -> Outcome:
    return Outcome(fence[0], fence[1], OutcomeKind.SNOOZED, retry_delay=delay, overloaded=overloaded)


def test_a_snoozed_run_comes_back_after_its_delay_uncharged_and_counted(store: Store, clock: ShiftedClock) -> None:
    run_id = enqueue_one(store, max_attempts=1)
    [first] = claim(store, "w1")
    assert first.snoozes == 0
    start(store, "w1", [first.fence])
    store.cycle(CycleRequest("w1", [QUEUE], [], [_snoozed(first.fence, 60.0, overloaded=True)], 0, LEASE))

    run = store.get_run(run_id)
    assert run is not None and run.status is RunStatus.QUEUED
    assert (run.attempt, run.max_attempts, run.declared_max_attempts, run.snoozes) == (1, 2, 1, 1)
    assert run.uncharged_attempts["snooze"] == 1 and run.finished_at is None
    assert store.run_events(run_id)[-1].type == "RunSnoozed"
    assert store.run_events(run_id)[-1].metadata == history.attempt_ended("queued", 1, None, 60.0, True, True).metadata

    assert claim(store, "w1") == []  # not before its delay, on the store's clock
    clock.advance(61)
    [again] = claim(store, "w1")
    assert (again.id, again.attempt, again.max_attempts, again.snoozes) == (run_id, 2, 2, 1)


def test_a_snooze_of_a_run_asked_to_cancel_cancels_it_and_counts_nothing(store: Store) -> None:
    run_id = enqueue_one(store, max_attempts=1)
    [first] = claim(store, "w1")
    assert store.cancel_run(run_id) is RunStatus.RUNNING
    store.cycle(CycleRequest("w1", [QUEUE], [], [_snoozed(first.fence, 5.0)], 0, LEASE))
    run = store.get_run(run_id)
    assert run is not None and run.status is RunStatus.CANCELED
    assert (run.max_attempts, run.snoozes) == (1, 0)
    last = store.run_events(run_id)[-1]
    assert history.Event(last.type, last.metadata) == history.attempt_ended("canceled", 1, None, 5.0, True)


def test_a_stale_snooze_is_fenced_out_and_changes_nothing(store: Store, clock: ShiftedClock) -> None:
    run_id = enqueue_one(store, max_attempts=3)
    [first] = claim(store, "w1", lease=1.0)
    clock.advance(5)
    store.sweep("sweeper", 1.0)
    result = store.cycle(CycleRequest("w1", [QUEUE], [], [_snoozed(first.fence, 5.0)], 0, LEASE))
    assert result.fenced_out == [first.fence]
    run = store.get_run(run_id)
    assert run is not None and run.snoozes == 0
