"""Recovery by lease: expired leases are re-queued, or failed when spent.

A rescue counts as an attempt only of an attempt that started and ran alone
(domain/recovery.py; tests/contract/test_suspects.py covers the rule).
"""

import time

import pytest

from tidegate import RunFailed, RunStatus
from tidegate.domain.model import CycleRequest

from .conftest import event_types

QUEUE = "swept"


def _claim(store, worker, lease):
    return store.cycle(CycleRequest(worker, [QUEUE], [], [], 1, lease)).claimed


def _sweep_after(clock, store, seconds, predicate):
    """Move the clock past a lease: the next sweep must repair it (no polling)."""
    clock.advance(seconds)
    report = store.sweep("sweeper-1", 0.05)
    assert report is not None and predicate(report), report
    return report


def test_sweeper_requeues_an_expired_run_then_fails_it_when_attempts_are_exhausted(app, clock):
    @app.task(name="t.orphan", queue=QUEUE, max_attempts=2)
    def orphan() -> int:
        return 1

    store = app.store
    handle = orphan.submit()

    # not expired yet: nothing to do
    [run] = _claim(store, "dead-worker-1", lease=0.3)
    assert run.attempt == 1
    store.cycle(CycleRequest("dead-worker-1", [QUEUE], [run.fence], [], 0, 0.3))  # it started, alone
    report = store.sweep("sweeper-1", 0.05)
    assert report is not None and not report
    assert handle.status() is RunStatus.RUNNING

    report = _sweep_after(clock, store, 0.3, lambda r: handle.id in r.requeued)
    assert report.failed == []
    record = handle.info()
    assert record.status is RunStatus.QUEUED
    assert record.worker_id is None and record.lease_expires_at is None
    assert record.attempt == 1 and record.max_attempts == 2  # the rescue counted the attempt
    assert record.suspect  # and it runs alone next
    requeued = [e for e in store.run_events(handle.id) if e.type == "RunRequeued"]
    assert len(requeued) == 1
    assert requeued[0].metadata["reason"] == "lease expired"
    assert requeued[0].metadata["worker"] == "dead-worker-1"

    [run] = _claim(store, "dead-worker-2", lease=0.3)
    assert run.attempt == 2
    store.cycle(CycleRequest("dead-worker-2", [QUEUE], [run.fence], [], 0, 0.3))
    report = _sweep_after(clock, store, 0.3, lambda r: handle.id in r.failed)
    assert report.requeued == []
    record = handle.info()
    assert record.status is RunStatus.FAILED
    assert "lease expired" in record.error
    assert record.finished_at is not None
    with pytest.raises(RunFailed, match="lease expired"):
        handle.wait(timeout=5)
    assert event_types(app, handle.id)[-1] == "RunFailed"
    # nothing left to claim: a poison run that kills its workers ends, it does not loop
    assert _claim(store, "worker-3", lease=30) == []


def test_only_one_sweeper_at_a_time(app):
    store = app.store
    assert store.sweep("sweeper-1", 10) is not None
    assert store.sweep("sweeper-2", 10) is None  # sweeper-1 holds the turn
    assert store.sweep("sweeper-1", 10) is not None  # the holder may sweep again


def test_a_sweeper_turn_expires_when_its_holder_dies(app, clock):
    store = app.store
    assert store.sweep("sweeper-1", 0.1) is not None  # a turn of 3 intervals: 0.3 s
    assert store.sweep("sweeper-2", 0.1) is None
    clock.advance(0.3)
    assert store.sweep("sweeper-2", 0.1) is not None


def test_a_canceled_run_whose_worker_died_ends_canceled(app, clock):
    @app.task(name="t.orphan_cancel", queue=QUEUE, max_attempts=5)
    def orphan_cancel() -> int:
        return 1

    store = app.store
    handle = orphan_cancel.submit()
    _claim(store, "dead-worker", lease=0.3)
    assert handle.cancel() is RunStatus.RUNNING  # asked; its (dead) worker never answers
    _sweep_after(clock, store, 0.3, bool)
    assert handle.status() is RunStatus.CANCELED


def test_a_run_whose_worker_died_is_recovered_within_lease_plus_sweep_interval(app, start_worker, monkeypatch):
    """A worker claims and dies (it never renews); a live worker's sweeper rescues and runs the run.

    Measured on the store's clock: from the dead lease's expiry to the RunRequeued
    event is at most one sweep interval (plus slack for a busy machine).
    """
    monkeypatch.setenv("TIDEGATE_LEASE_DURATION", "1s")
    executed = []

    @app.task(name="t.rescued", queue=QUEUE, max_attempts=3)
    def rescued(x: int) -> int:
        executed.append(x)
        return x * 10

    store = app.store
    handle = rescued.submit(x=4)
    [run] = _claim(store, "dead-worker", lease=1.0)
    store.cycle(CycleRequest("dead-worker", [QUEUE], [(run.id, run.attempt)], [], 0, 1.0))
    dead_lease = handle.info().lease_expires_at
    worker = start_worker()
    assert worker.settings.lease_duration == 1.0
    sweep_interval = worker.settings.sweep_interval
    assert handle.wait(timeout=30) == 40
    assert executed == [4]  # the dead worker never ran it; the survivor did, once
    record = handle.info()
    assert record.attempt == 2
    requeued = next(e for e in store.run_events(handle.id) if e.type == "RunRequeued")
    assert requeued.metadata["reason"] == "lease expired"
    assert requeued.at >= dead_lease  # never reaped before it expired
    late_by = (requeued.at - dead_lease).total_seconds()
    assert late_by <= sweep_interval + 3.0, f"re-queued {late_by:.2f}s after its lease expired"


def test_a_live_worker_keeps_renewing_a_long_run_past_its_lease(app, start_worker, monkeypatch):
    """Renewal runs off the task's thread: a task that blocks the CPU for 3 leases is not reaped."""
    monkeypatch.setenv("TIDEGATE_LEASE_DURATION", "1s")

    @app.task(name="t.long", queue=QUEUE)
    def long() -> int:
        deadline = time.monotonic() + 3
        n = 0
        while time.monotonic() < deadline:
            n += 1  # busy, holding the GIL often
        return 1

    @app.task(name="t.long_async", queue=QUEUE)
    async def long_async() -> int:
        time.sleep(3)  # noqa: ASYNC251 - blocks its own event loop on purpose: the case under test
        return 2

    start_worker()
    first = long.submit()
    second = long_async.submit()
    assert first.wait(timeout=60) == 1
    assert second.wait(timeout=60) == 2
    for handle in (first, second):
        types = event_types(app, handle.id)
        assert "RunRequeued" not in types, types
        assert handle.info().attempt == 1
