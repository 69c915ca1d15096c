"""A paused queue's time does not count against its runs' dispatch deadlines (domain/deadlines.py).

While the queue is paused the deadline sweep fails none of its runs, however
late; resuming moves each queued run's deadline later by the time that run
spent paused (from the pause, or from its submit if it came during the pause).
Same expectations on both adapters, on the store's shifted clock.
"""

from __future__ import annotations

import pytest

from tidegate.domain.clock import ShiftedClock
from tidegate.domain.limits import QueueConfig
from tidegate.domain.model import RunStatus
from tidegate.storage.port import Store

from .conftest import QUEUE, claim, enqueue_one

pytestmark = pytest.mark.advances_clock
DEADLINE = 10.0


def _failed(store: Store) -> list[str]:
    report = store.sweep("sweeper-test", 1.0)
    assert report is not None, "the sweeper lock was not free"
    return list(report.failed)


def test_runs_of_a_paused_queue_are_not_failed_and_the_paused_time_does_not_count(
    store: Store, clock: ShiftedClock
) -> None:
    store.register_limits(None, [QueueConfig(QUEUE), QueueConfig("open")], [])
    before = enqueue_one(store, deadline=DEADLINE)  # queued at t0: due to fail at t0 + 10
    unpaused = enqueue_one(store, "open", deadline=DEADLINE)
    clock.advance(2)
    assert store.set_queue_paused(QUEUE, True)  # paused at t0 + 2
    clock.advance(3)
    during = enqueue_one(store, deadline=DEADLINE)  # queued at t0 + 5, while paused
    clock.advance(20)  # t0 + 25: both far past their deadlines, in wall time

    assert _failed(store) == [unpaused], "only the other queue's late run fails"
    assert {store.get_run(run).status for run in (before, during)} == {RunStatus.QUEUED}

    assert store.set_queue_paused(QUEUE, False)  # resumed at t0 + 25
    # `before` spent 23 s paused (t0+2 .. t0+25): due at t0 + 33; `during` 20 s: due at t0 + 35.
    assert _failed(store) == []

    clock.advance(7.5)  # t0 + 32.5
    assert _failed(store) == []
    clock.advance(1)  # t0 + 33.5
    assert _failed(store) == [before]
    assert store.get_run(during).status is RunStatus.QUEUED
    clock.advance(2)  # t0 + 35.5
    assert _failed(store) == [during]
    assert store.get_run(during).error.startswith("capacity:")


def test_a_resumed_queue_s_runs_are_claimable_again_within_their_moved_deadline(
    store: Store, clock: ShiftedClock
) -> None:
    store.register_limits(None, [QueueConfig(QUEUE)], [])
    run = enqueue_one(store, deadline=DEADLINE)
    assert store.set_queue_paused(QUEUE, True)
    clock.advance(DEADLINE + 5)
    assert store.set_queue_paused(QUEUE, False)
    assert [claimed.id for claimed in claim(store)] == [run], "a claim still sees it: its deadline moved"
