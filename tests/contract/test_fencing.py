"""Fencing: a stale holder (an attempt that was taken over) can never overwrite the present one.

These drive the store port directly with two worker identities, A and B, so
the interleaving is exact rather than left to timing.
"""

import time

import pytest

from tidegate import RunStatus
from tidegate.domain.model import CycleRequest, Outcome, OutcomeKind

from .conftest import event_types, execute_sql, wait_until

QUEUE = "fenced"


@pytest.fixture
def job(app):
    @app.task(name="t.fenced", queue=QUEUE, max_attempts=3)
    def fenced(x: int) -> int:
        return x

    return fenced


def _claim(store, worker, lease=30.0, limit=1):
    return store.cycle(CycleRequest(worker, [QUEUE], [], [], limit, lease)).claimed


def _expire_and_sweep(store, clock, run_id, lease_seconds):
    """Move the store's clock past the lease, then one sweep must re-queue the run."""
    clock.advance(lease_seconds)
    report = store.sweep("test-sweeper", 0.05)
    assert report is not None and run_id in report.requeued


def test_a_taken_over_attempt_cannot_report_its_outcome(app, job, clock):
    store = app.store
    handle = job.submit(x=1)

    [first] = _claim(store, "worker-A", lease=0.3)
    assert (first.id, first.attempt) == (handle.id, 1)
    store.cycle(CycleRequest("worker-A", [QUEUE], [(handle.id, 1)], [], 0, 0.3))  # A started it
    _expire_and_sweep(store, clock, handle.id, 0.3)
    assert handle.status() is RunStatus.QUEUED

    [second] = _claim(store, "worker-B")
    assert (second.id, second.attempt) == (handle.id, 2)

    # A wakes up and reports attempt 1 as completed: refused, reported back as fenced out
    late = store.cycle(
        CycleRequest("worker-A", [QUEUE], [], [Outcome(handle.id, 1, OutcomeKind.COMPLETED, result="stale A")], 0, 30)
    )
    assert late.fenced_out == [(handle.id, 1)]
    record = handle.info()
    assert record.status is RunStatus.RUNNING
    assert record.attempt == 2 and record.worker_id == "worker-B"
    assert record.result is None

    # nor may A fail it or retry it
    late = store.cycle(
        CycleRequest(
            "worker-A",
            [QUEUE],
            [],
            [Outcome(handle.id, 1, OutcomeKind.FAILED, error="stale", retry_delay=0.0)],
            0,
            30,
        )
    )
    assert late.fenced_out == [(handle.id, 1)]
    # nor report attempt 2 under its own name (the fence is the attempt *and* the holder)
    late = store.cycle(
        CycleRequest("worker-A", [QUEUE], [], [Outcome(handle.id, 2, OutcomeKind.COMPLETED, result="A")], 0, 30)
    )
    assert late.fenced_out == [(handle.id, 2)]
    assert handle.info().status is RunStatus.RUNNING

    # B, the present holder, completes it
    done = store.cycle(
        CycleRequest("worker-B", [QUEUE], [], [Outcome(handle.id, 2, OutcomeKind.COMPLETED, result="B")], 0, 30)
    )
    assert done.fenced_out == []
    assert handle.wait(timeout=5) == "B"
    record = handle.info()
    assert record.attempt == 2 and record.worker_id is None

    # and a late outcome after completion changes nothing either
    late = store.cycle(
        CycleRequest("worker-A", [QUEUE], [], [Outcome(handle.id, 1, OutcomeKind.FAILED, error="late")], 0, 30)
    )
    assert late.fenced_out == [(handle.id, 1)]
    assert handle.info().status is RunStatus.COMPLETED and handle.info().error is None
    types = event_types(app, handle.id)
    assert types.count("RunCompleted") == 1 and "RunFailed" not in types


def test_renewing_a_taken_over_attempt_reports_it_lost(app, job, clock):
    store = app.store
    handle = job.submit(x=1)
    keep = job.submit(x=2)
    claimed = _claim(store, "worker-A", lease=0.3, limit=2)
    assert {run.id for run in claimed} == {handle.id, keep.id}
    # A keeps renewing `keep`, but stops renewing `handle` and loses it
    assert store.renew_leases("worker-A", [(keep.id, 1)], 30) == []
    _expire_and_sweep(store, clock, handle.id, 0.3)
    [taken] = _claim(store, "worker-B")
    assert (taken.id, taken.attempt) == (handle.id, 2)

    lost = store.renew_leases("worker-A", [(handle.id, 1), (keep.id, 1)], 30)
    assert [tuple(fence) for fence in lost] == [(handle.id, 1)]
    # B still holds it, with B's lease untouched by A's attempt to renew
    assert store.renew_leases("worker-B", [(handle.id, 2)], 30) == []
    # and a worker cannot renew someone else's attempt even with the right attempt number
    assert [tuple(f) for f in store.renew_leases("worker-A", [(handle.id, 2)], 30)] == [(handle.id, 2)]
    assert handle.info().worker_id == "worker-B"


def test_a_just_renewed_lease_is_not_reaped(app, job, clock):
    store = app.store
    handle = job.submit(x=1)
    _claim(store, "worker-A", lease=0.5)
    assert store.renew_leases("worker-A", [(handle.id, 1)], 30) == []
    clock.advance(0.8)  # past the original lease, well within the renewed one
    report = store.sweep("test-sweeper", 0.05)
    assert report is not None and not report
    assert handle.info().status is RunStatus.RUNNING
    assert store.renew_leases("worker-A", [(handle.id, 1)], 30) == []


def test_a_start_from_a_taken_over_attempt_is_ignored(app, job, clock):
    store = app.store
    handle = job.submit(x=1)
    _claim(store, "worker-A", lease=0.3)
    _expire_and_sweep(store, clock, handle.id, 0.3)
    _claim(store, "worker-B")
    store.cycle(CycleRequest("worker-A", [QUEUE], [(handle.id, 1)], [], 0, 30))  # A's late RunStarted
    assert "RunStarted" not in event_types(app, handle.id)
    assert handle.info().started_at is None
    store.cycle(CycleRequest("worker-B", [QUEUE], [(handle.id, 2)], [], 0, 30))
    started = [e for e in app.store.run_events(handle.id) if e.type == "RunStarted"]
    assert [(e.metadata["attempt"], e.metadata["worker"]) for e in started] == [(2, "worker-B")]


def test_two_claimers_never_get_the_same_run(app, job):
    store = app.store
    handles = job.submit_many([{"x": i} for i in range(10)])
    a = _claim(store, "worker-A", limit=6)
    b = _claim(store, "worker-B", limit=6)
    assert len(a) == 6 and len(b) == 4
    assert {r.id for r in a}.isdisjoint({r.id for r in b})
    assert {r.id for r in a} | {r.id for r in b} == {h.id for h in handles}
    assert _claim(store, "worker-C", limit=5) == []


def test_a_worker_that_lost_its_lease_stops_the_attempt_and_its_outcome_is_discarded(
    app, start_worker, database_url, backend, monkeypatch
):
    """Worker level: the store takes the attempt away; renewal reports it lost; the task is told."""
    import threading

    from tidegate import Context

    monkeypatch.setenv("TIDEGATE_LEASE_DURATION", "3s")
    started = threading.Event()
    reasons = []

    @app.task(name="t.hold", queue=QUEUE, max_attempts=3)
    def hold(ctx: Context) -> str:
        if ctx.attempt == 1:
            started.set()
            try:
                for _ in range(3000):  # 60 s in small steps, so the worker's interrupt can land
                    time.sleep(0.02)
            finally:
                reasons.append(ctx.cancel_reason)
            return "attempt 1 (stale)"
        return f"attempt {ctx.attempt}"

    worker = start_worker(max_workers=2)
    handle = hold.submit()
    assert started.wait(30)
    wait_until(lambda: handle.info().status is RunStatus.RUNNING, 30)
    # the lease runs out behind the worker's back (as if it had stalled), and a sweep rescues the run
    # before the worker renews it (a lease not yet reaped may still be renewed: that is allowed)
    if backend == "sqlite":
        expire = "UPDATE tidegate_runs SET lease_expires_at = lease_expires_at - 3600 WHERE id = ?"
    else:
        expire = "UPDATE tidegate_runs SET lease_expires_at = lease_expires_at - interval '1 hour' WHERE id = ?"

    def expire_and_sweep():
        execute_sql(database_url, expire, (handle.id,))
        report = app.store.sweep(worker.id, 1.0)  # the sweeper lock is the worker's: take it as its own
        return report is not None and handle.id in report.requeued

    wait_until(expire_and_sweep, 30, 0.05, message="the sweep to take the attempt away")
    assert handle.wait(timeout=30) == "attempt 2"
    wait_until(lambda: reasons, 30, message="the stale attempt to be told it lost its lease")
    assert reasons == ["lease lost"]
    wait_until(lambda: worker.in_flight == 0, 30)
    record = handle.info()
    assert record.status is RunStatus.COMPLETED and record.result == "attempt 2"
    completed = [e for e in app.store.run_events(handle.id) if e.type == "RunCompleted"]
    assert [e.metadata["attempt"] for e in completed] == [2]
