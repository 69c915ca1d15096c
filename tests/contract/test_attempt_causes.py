"""What grows a run's budget is counted by cause, on both backends (domain/attempts.py, migration 0018).

Every verb that grows `max_attempts` counts the growth, so the declared
budget is always `max_attempts` less the counts; a database from before the
counts gets them from the events each growth left.
"""

from __future__ import annotations

from tests.conftest import execute_sql
from tidegate.bootstrap import open_store
from tidegate.domain.clock import ShiftedClock
from tidegate.domain.model import CycleRequest, RunStatus, WorkerRegistration

from .conftest import LEASE, QUEUE, claim, enqueue_one, failed, start

CAUSES = ("child_waits", "worker_shutdowns", "lost_workers", "manual_retries")


def _counts(store, run_id: str) -> tuple[int, ...]:
    run = store.get_run(run_id)
    return (run.max_attempts, run.declared_max_attempts, *(getattr(run, cause) for cause in CAUSES))


def _grown_every_way(store, clock: ShiftedClock) -> str:
    """A run allowing 2: handed back, then lost beside another run (not charged), then failed and retried."""
    run_id = enqueue_one(store, max_attempts=2)
    [first] = claim(store, "leaving")
    store.hand_back("leaving", [first.fence])
    assert _counts(store, run_id) == (3, 2, 0, 1, 0, 0)

    enqueue_one(store)
    store.register_worker(WorkerRegistration("gone", 2, [QUEUE], False, LEASE))
    lost = claim(store, "gone", limit=2)
    assert run_id in {run.id for run in lost}
    clock.advance(LEASE + 1)
    assert store.sweep("sweeper", 1.0) is not None
    assert store.get_run(run_id).status is RunStatus.QUEUED
    assert _counts(store, run_id) == (4, 2, 0, 1, 1, 0)

    while True:  # a worker takes one group of the rescued suspects at a time
        [again] = claim(store, "w2")
        start(store, "w2", [again.fence])
        store.cycle(CycleRequest("w2", [QUEUE], [], [failed(again.fence)], 0, LEASE))
        if again.id == run_id:
            break
    assert store.get_run(run_id).status is RunStatus.FAILED
    retried = store.retry_run(run_id)
    assert (retried.max_attempts, retried.declared_max_attempts, retried.manual_retries) == (5, 2, 1)
    return run_id


def test_each_growth_of_the_budget_is_counted_by_its_cause(store, clock):
    run_id = _grown_every_way(store, clock)
    assert _counts(store, run_id) == (5, 2, 0, 1, 1, 1)
    causes = {"child_wait": 0, "worker_shutdown": 1, "lost_worker": 1, "snooze": 0}
    assert store.get_run(run_id).uncharged_attempts == causes


def test_a_database_from_before_the_counts_gets_them_from_the_events(store, clock, database_url):
    run_id = _grown_every_way(store, clock)
    untouched = enqueue_one(store, max_attempts=3)
    for cause in CAUSES:
        execute_sql(database_url, f"ALTER TABLE tidegate_runs DROP COLUMN {cause}")
    execute_sql(database_url, "DELETE FROM tidegate_schema_version WHERE version = 18")
    migrated = open_store(database_url, clock=clock)
    try:
        assert _counts(migrated, run_id) == (5, 2, 0, 1, 1, 1)
        assert _counts(migrated, untouched) == (3, 3, 0, 0, 0, 0)
    finally:
        migrated.close()
