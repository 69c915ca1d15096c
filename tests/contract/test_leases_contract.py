"""Leases through the Store port: renewal, the sweep and its turn, the overflow signal.

Same expectations on both adapters. Where a lease or a turn must lapse the
contract advances the store's clock (`advances_clock`) instead of sleeping.
"""

from __future__ import annotations

import threading

import pytest

from tidegate import RunStatus
from tidegate.domain.model import WorkerRegistration

from .conftest import QUEUE, claim, enqueue_one, start

LEASE = 30.0
PAST_THE_LEASE = LEASE + 5


def test_renewing_held_leases_extends_them_and_reports_nothing_lost(store):
    enqueue_one(store)
    [run] = claim(store, "w1", lease=LEASE)
    before = store.get_run(run.id).lease_expires_at
    assert store.renew_leases("w1", [run.fence], 600) == []
    assert (store.get_run(run.id).lease_expires_at - before).total_seconds() > 500


def test_renewing_a_lease_the_worker_does_not_hold_reports_it_lost(store):
    enqueue_one(store)
    [run] = claim(store, "w1")
    stale = (run.id, run.attempt + 1)
    lost = store.renew_leases("w2", [run.fence, stale], LEASE)
    assert sorted(tuple(fence) for fence in lost) == sorted([run.fence, stale])
    assert store.renew_leases("w1", [], LEASE) == []


def test_one_sweeper_holds_the_turn_and_a_sweep_with_nothing_expired_repairs_nothing(store):
    enqueue_one(store)
    claim(store, "w1")
    report = store.sweep("sweeper-1", 60)
    assert report is not None
    assert (report.requeued, report.failed, report.leaks_repaired, report.step_slots_expired) == ([], [], 0, 0)
    assert store.sweep("sweeper-2", 60) is None
    assert store.sweep("sweeper-1", 60) is not None


@pytest.mark.advances_clock
def test_the_sweeper_turn_lapses_when_its_holder_stops_sweeping(store, clock):
    assert store.sweep("sweeper-1", 10) is not None
    clock.advance(3 * 10 + 1)
    assert store.sweep("sweeper-2", 10) is not None


@pytest.mark.advances_clock
def test_the_sweep_requeues_an_expired_attempt_that_started_alone_counting_it(store, clock):
    run_id = enqueue_one(store, max_attempts=2)
    [run] = claim(store, "dead", lease=LEASE)
    start(store, "dead", [run.fence])
    clock.advance(PAST_THE_LEASE)

    report = store.sweep("sweeper", 1)
    assert (report.requeued, report.failed) == ([run_id], [])
    record = store.get_run(run_id)
    assert (record.status, record.worker_id, record.lease_expires_at) == (RunStatus.QUEUED, None, None)
    assert record.suspect  # it runs alone next
    [requeued] = [event for event in store.run_events(run_id) if event.type == "RunRequeued"]
    metadata = requeued.metadata
    assert (metadata["reason"], metadata["worker"], metadata["charged"]) == ("lease expired", "dead", True)


@pytest.mark.advances_clock
def test_the_sweep_fails_an_expired_attempt_that_was_the_last(store, clock):
    run_id = enqueue_one(store, max_attempts=1)
    [run] = claim(store, "dead", lease=LEASE)
    start(store, "dead", [run.fence])
    clock.advance(PAST_THE_LEASE)

    report = store.sweep("sweeper", 1)
    assert (report.requeued, report.failed) == ([], [run_id])
    record = store.get_run(run_id)
    assert record.status is RunStatus.FAILED and "lease expired" in record.error
    assert claim(store, "w2") == []


@pytest.mark.advances_clock
def test_the_sweep_does_not_charge_an_attempt_that_never_started(store, clock):
    run_id = enqueue_one(store, max_attempts=1)
    claim(store, "dead", lease=LEASE)
    clock.advance(PAST_THE_LEASE)

    assert store.sweep("sweeper", 1).requeued == [run_id]
    [requeued] = [event for event in store.run_events(run_id) if event.type == "RunRequeued"]
    assert requeued.metadata["charged"] is False
    assert [run.id for run in claim(store, "w2")] == [run_id]


@pytest.mark.advances_clock
def test_a_renewed_lease_is_not_swept_while_one_left_to_lapse_beside_it_is(store, clock):
    enqueue_one(store)
    enqueue_one(store)
    renewed, lapsed = claim(store, "w1", limit=2, lease=LEASE)
    clock.advance(LEASE / 2)
    assert store.renew_leases("w1", [renewed.fence], LEASE) == []
    clock.advance(LEASE / 2 + 1)
    assert store.sweep("sweeper", 1).requeued == [lapsed.id]
    assert store.get_run(renewed.id).status is RunStatus.RUNNING


def test_check_overflow_is_silent_without_a_full_worker_serving_the_queue(store):
    for _ in range(3):
        enqueue_one(store)
    assert store.check_overflow("w1", [QUEUE], 60) is None  # no worker registered
    store.register_worker(WorkerRegistration("w1", 2, [QUEUE], False, 60))
    claim(store, "w1")
    assert store.check_overflow("w1", [QUEUE], 60) is None  # w1 has room for one more


def test_check_overflow_reports_the_waiting_backlog_once_per_interval(store):
    store.register_worker(WorkerRegistration("w1", 1, [QUEUE], False, 60))
    store.register_worker(WorkerRegistration("w2", 1, [QUEUE], False, 60))
    for _ in range(5):
        enqueue_one(store)
    claim(store, "w1")
    claim(store, "w2")

    assert store.check_overflow("w1", [QUEUE], 60) == 3
    assert store.check_overflow("w2", [QUEUE], 60) is None  # w1 raised it for this interval


@pytest.mark.advances_clock
def test_check_overflow_is_raised_again_once_the_interval_has_passed(store, clock):
    store.register_worker(WorkerRegistration("w1", 1, [QUEUE], False, 600))
    for _ in range(2):
        enqueue_one(store)
    claim(store, "w1")
    assert store.check_overflow("w1", [QUEUE], 60) == 1
    clock.advance(61)
    assert store.check_overflow("w1", [QUEUE], 60) == 1


def test_check_overflow_does_not_count_runs_a_limit_holds_back(store):
    store.set_limit(f"queue:{QUEUE}", 1)
    store.register_worker(WorkerRegistration("w1", 1, [QUEUE], False, 60))
    for _ in range(3):
        enqueue_one(store)
    claim(store, "w1")
    assert store.check_overflow("w1", [QUEUE], 60) is None


def test_a_renewal_chosen_as_a_deadlocks_victim_is_sent_again_and_renews(store, database_url, backend, caplog):
    """A real deadlock: another transaction holds the renewal's second run; once the renewal,
    holding the first, waits for it, that transaction asks for the first. The renewal waited
    first, so its deadlock check runs first (the other's is set far later) and it is the victim.
    Sent again at once, it waits for the other transaction's commit and renews both leases; before,
    the worker's renewal failed and was tried again only at its next turn."""
    if backend == "sqlite":
        pytest.skip("SQLite has one writer at a time (BEGIN IMMEDIATE): two transactions never wait on each other")
    import psycopg

    from tests import races  # a race's watch of server backends by pid: not run through a pooler
    from tests.conftest import wait_until

    for _ in range(2):
        enqueue_one(store)
    runs = sorted(claim(store, "w1", limit=2), key=lambda run: run.id)  # the renewal's lock order: by id
    before = {run.id: store.get_run(run.id).lease_expires_at for run in runs}
    outcome: dict[str, object] = {}

    def renew() -> None:
        try:
            outcome["lost"] = store.renew_leases("w1", [run.fence for run in runs], 600)
        except Exception as error:  # the test reports it
            outcome["error"] = error

    with psycopg.connect(database_url) as other:
        other.execute("SET deadlock_timeout = '30s'")
        other.execute("SELECT 1 FROM tidegate_runs WHERE id = %s FOR UPDATE", (runs[1].id,))
        (other_pid,) = other.execute("SELECT pg_backend_pid()").fetchone() or (0,)
        renewal = threading.Thread(target=renew, daemon=True)
        renewal.start()
        with psycopg.connect(database_url, autocommit=True) as monitor:
            wait_until(
                lambda: (
                    monitor.execute(
                        "SELECT count(*) FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))", (other_pid,)
                    ).fetchone()
                    == (1,)
                ),
                races.TIMEOUT,
                message="the renewal to wait for the second run",
            )
        other.execute("SELECT 1 FROM tidegate_runs WHERE id = %s FOR UPDATE", (runs[0].id,))  # the circle
        other.commit()
    renewal.join(races.TIMEOUT)
    assert outcome == {"lost": []}, outcome
    assert "deadlock's victim" in caplog.text  # it was the victim, and was sent again
    for run in runs:
        assert (store.get_run(run.id).lease_expires_at - before[run.id]).total_seconds() > 500
