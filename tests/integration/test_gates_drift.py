"""No drift between slots in use and holder rows, on both adapters.

Every way a run stops running — completion, failure, retry, cancel, timeout,
hand-back, lease expiry — must release its holder rows in the same
transaction, so `scope_usage()` returns to {} and `tidegate_holders` is empty,
and the sweep's leak repair finds nothing to repair. A holder row that is
planted behind tidegate's back *is* repaired, with exactly one
SlotLeakRepaired event. (A SIGKILLed worker process is in
process/test_gates_processes.py.)
"""

from __future__ import annotations

import threading
import time

import pytest

from tidegate import App, Concurrency, Context, RunFailed, RunQueueConfig, RunStatus, TagConcurrencyLimit
from tidegate.domain.model import CycleRequest, Outcome, OutcomeKind

from .conftest import execute_sql, wait_status, wait_until

QUEUE = "drift"
SCOPES = {"global", "queue:drift", "tag:tenant=acme"}


def holder_rows(database_url):
    return execute_sql(database_url, "SELECT scope, run_id, attempt FROM tidegate_slot_holders ORDER BY scope")


def leak_events(database_url):
    return execute_sql(database_url, "SELECT run_id, metadata FROM tidegate_events WHERE type = 'SlotLeakRepaired'")


def assert_released(app, database_url):
    assert app.store.scope_usage() == {}
    assert holder_rows(database_url) == []


def assert_held_by(app, database_url, run_id, attempt):
    assert app.store.scope_usage() == dict.fromkeys(SCOPES, 1)
    assert sorted(holder_rows(database_url)) == sorted((scope, run_id, attempt) for scope in SCOPES)


@pytest.fixture
def dapp(database_url, clock):
    application = App(
        database_url,
        clock=clock,
        run_queue=RunQueueConfig(
            max_concurrent_runs=10,
            tag_concurrency_limits=[TagConcurrencyLimit(key="tenant", per_unique_value=True, limit=5)],
        ),
    )
    application.queue(QUEUE, concurrency=Concurrency(global_limit=5))
    try:
        yield application
    finally:
        application.close()


def _gated_task(app, name, **options):
    """A task that waits for the test to let it go, then fails as told."""
    entered = threading.Event()
    release = threading.Event()

    @app.task(name=name, queue=QUEUE, **options)
    def gated(ctx: Context, fail_attempts: int = 0, wait: bool = True) -> int:
        entered.set()
        if wait:
            while not release.wait(0.01):
                ctx.raise_if_cancelled()
        if ctx.attempt <= fail_attempts:
            raise RuntimeError(f"attempt {ctx.attempt} fails")
        return ctx.attempt

    return gated.options(tags={"tenant": "acme"}), entered, release


def test_released_on_completion(dapp, database_url, start_worker):
    task, entered, release = _gated_task(dapp, "d.complete")
    handle = task.submit()
    start_worker(application=dapp, max_workers=2)
    entered.wait(30)
    assert_held_by(dapp, database_url, handle.id, 1)
    release.set()
    assert handle.wait(timeout=30) == 1
    assert_released(dapp, database_url)


def test_released_on_failure(dapp, database_url, start_worker):
    task, entered, release = _gated_task(dapp, "d.fail")
    handle = task.submit(fail_attempts=1)
    start_worker(application=dapp, max_workers=2)
    entered.wait(30)
    assert_held_by(dapp, database_url, handle.id, 1)
    release.set()
    with pytest.raises(RunFailed):
        handle.wait(timeout=30)
    assert_released(dapp, database_url)


def test_released_between_retries(dapp, database_url, start_worker):
    task, _entered, _release = _gated_task(dapp, "d.retry", max_attempts=2, retry_backoff="2s")
    handle = task.submit(fail_attempts=1, wait=False)
    start_worker(application=dapp, max_workers=2)
    wait_until(
        lambda: "RunRetried" in [e.type for e in dapp.store.run_events(handle.id)],
        30,
        message="the first attempt to fail",
    )
    record = handle.info()
    assert (record.status, record.attempt) == (RunStatus.QUEUED, 1)  # waiting out a backoff of >= 1s
    assert_released(dapp, database_url)  # and holding nothing meanwhile
    assert handle.wait(timeout=30) == 2
    assert_released(dapp, database_url)


def test_released_on_cancel_of_a_running_run(dapp, database_url, start_worker):
    task, entered, _release = _gated_task(dapp, "d.cancel")
    handle = task.submit()
    start_worker(application=dapp, max_workers=2)
    entered.wait(30)
    assert_held_by(dapp, database_url, handle.id, 1)
    handle.cancel()
    wait_status(dapp, handle.id, RunStatus.CANCELED)
    assert_released(dapp, database_url)


def test_released_on_timeout(dapp, database_url, start_worker):
    task, _entered, release = _gated_task(dapp, "d.timeout", timeout="200ms")
    handle = task.submit()
    start_worker(application=dapp, max_workers=2)
    with pytest.raises(RunFailed, match="Timeout"):
        handle.wait(timeout=30)
    release.set()
    assert_released(dapp, database_url)


def test_released_on_hand_back(dapp, database_url, start_worker):
    task, entered, release = _gated_task(dapp, "d.handback")
    handle = task.submit()
    worker = start_worker(application=dapp, max_workers=2)
    entered.wait(30)
    assert_held_by(dapp, database_url, handle.id, 1)
    worker.stop(timeout=30, grace=0)  # shutting down: in-flight runs go back to the queue
    wait_status(dapp, handle.id, RunStatus.QUEUED)
    assert "RunRequeued" in [e.type for e in dapp.store.run_events(handle.id)]
    assert_released(dapp, database_url)
    release.set()


def test_released_on_lease_expiry_recovery_without_a_leak_repair(dapp, database_url, clock):
    task, _, _ = _gated_task(dapp, "d.expire", max_attempts=3)
    handle = task.submit()
    store = dapp.store
    [claimed] = store.cycle(CycleRequest("doomed-worker", [QUEUE], [], [], 1, 0.3)).claimed
    assert claimed.id == handle.id
    assert_held_by(dapp, database_url, handle.id, 1)
    clock.advance(0.35)
    report = store.sweep("test-sweeper", 0.05)
    assert report is not None and handle.id in report.requeued
    assert report.leaks_repaired == 0  # released with the recovery, not found later as a leak
    assert handle.status() is RunStatus.QUEUED
    assert_released(dapp, database_url)
    assert leak_events(database_url) == []


def _complete_through_the_store(app, handle, worker="w-1"):
    [claimed] = app.store.cycle(CycleRequest(worker, [QUEUE], [], [], 1, 60)).claimed
    assert claimed.id == handle.id
    outcome = Outcome(handle.id, claimed.attempt, OutcomeKind.COMPLETED, result=1)
    assert app.store.cycle(CycleRequest(worker, [QUEUE], [], [outcome], 0, 60)).fenced_out == []
    assert handle.status() is RunStatus.COMPLETED


def _plant_holder(database_url, scope, run_id, attempt):
    if database_url.startswith("sqlite"):
        execute_sql(
            database_url,
            "INSERT INTO tidegate_holders (scope, holder, run_id, attempt, worker_id, slots, claimed_at, expires_at) "
            "VALUES (?, ?, ?, ?, 'ghost', 1, ?, ?)",
            (scope, run_id, run_id, attempt, time.time(), time.time() + 3600),
        )
    else:
        execute_sql(
            database_url,
            "INSERT INTO tidegate_holders (scope, holder, run_id, attempt, worker_id, slots, claimed_at, expires_at) "
            "VALUES (?, ?, ?, ?, 'ghost', 1, now(), now() + interval '1 hour')",
            (scope, run_id, run_id, attempt),
        )


def test_a_planted_holder_of_a_completed_run_is_repaired_once(dapp, database_url):
    task, _, _ = _gated_task(dapp, "d.leak")
    done = task.submit(wait=False)
    _complete_through_the_store(dapp, done)
    assert_released(dapp, database_url)
    store = dapp.store
    report = store.sweep("test-sweeper", 0.05)
    assert report is not None and report.leaks_repaired == 0

    _plant_holder(database_url, "queue:drift", done.id, 1)
    assert store.scope_usage() == {"queue:drift": 1}  # it counts against the limit until repaired
    report = store.sweep("test-sweeper", 0.05)
    assert report is not None and report.leaks_repaired == 1
    assert_released(dapp, database_url)
    leaks = [e for e in store.run_events(done.id) if e.type == "SlotLeakRepaired"]
    assert len(leaks) == 1
    assert leaks[0].metadata["scope"] == "queue:drift"
    assert leaks[0].metadata["attempt"] == 1
    # nothing more to repair: no second event
    report = store.sweep("test-sweeper", 0.05)
    assert report is not None and report.leaks_repaired == 0
    assert len(leak_events(database_url)) == 1


def test_a_planted_holder_of_a_stale_attempt_is_repaired_and_the_live_one_kept(dapp, database_url):
    task, _, _ = _gated_task(dapp, "d.stale", max_attempts=3)
    handle = task.submit()
    store = dapp.store
    [claimed] = store.cycle(CycleRequest("w-1", [QUEUE], [], [], 1, 60)).claimed
    assert claimed.attempt == 1
    _plant_holder(database_url, "tag:tenant=other", handle.id, 0)  # an attempt that is not running
    assert store.scope_usage() == {**dict.fromkeys(SCOPES, 1), "tag:tenant=other": 1}
    report = store.sweep("test-sweeper", 0.05)
    assert report is not None and report.leaks_repaired == 1
    assert_held_by(dapp, database_url, handle.id, 1)  # the running attempt's holders stay
    assert len(leak_events(database_url)) == 1
