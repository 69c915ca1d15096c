"""Failures: retries with backoff, timeouts (sync and async), cancel of queued and running runs."""

import asyncio
import threading
import time

import pytest

from tidegate import Context, RunCanceled, RunFailed, RunStatus
from tidegate.domain.model import CycleRequest

from .conftest import event_types, wait_status, wait_until


def test_a_run_that_fails_twice_then_succeeds_is_retried(app, start_worker):
    seen = []

    @app.task(name="t.flaky", max_attempts=3, retry_backoff="50ms")
    def flaky(ctx: Context) -> str:
        seen.append(ctx.attempt)
        if ctx.attempt < 3:
            raise ConnectionError(f"flaky attempt {ctx.attempt}")
        return "third time lucky"

    start_worker()
    handle = flaky.submit()
    assert handle.wait(timeout=60) == "third time lucky"
    assert seen == [1, 2, 3]
    record = handle.info()
    assert record.attempt == 3 and record.status is RunStatus.COMPLETED
    assert record.error is None  # a success clears the earlier error
    types = event_types(app, handle.id)
    assert types.count("RunRetried") == 2
    assert types.count("RunDequeued") == 3
    assert types[-1] == "RunCompleted"
    retried = [event for event in app.store.run_events(handle.id) if event.type == "RunRetried"]
    assert [event.metadata["attempt"] for event in retried] == [1, 2]
    assert all("ConnectionError" in event.metadata["error"] for event in retried)
    # the backoff is honoured: attempt n+1 is not dequeued before attempt n's retry delay elapsed
    events = app.store.run_events(handle.id)
    for retry in retried:
        following = next(e for e in events if e.type == "RunDequeued" and e.id > retry.id)
        assert (following.at - retry.at).total_seconds() >= retry.metadata["retry_in"] - 0.01


def test_a_run_that_always_fails_ends_failed_after_max_attempts(app, start_worker):
    calls = []

    @app.task(name="t.doomed", max_attempts=2, retry_backoff="20ms")
    def doomed(ctx: Context):
        calls.append(ctx.attempt)
        raise ValueError(f"boom-xyz on attempt {ctx.attempt}")

    start_worker()
    handle = doomed.submit()
    with pytest.raises(RunFailed) as caught:
        handle.wait(timeout=60)
    assert caught.value.run_id == handle.id
    assert "ValueError: boom-xyz on attempt 2" in caught.value.error
    assert "Traceback" in caught.value.error
    assert calls == [1, 2]
    record = handle.info()
    assert record.status is RunStatus.FAILED and record.attempt == 2
    types = event_types(app, handle.id)
    assert types.count("RunRetried") == 1
    assert types[-1] == "RunFailed"


def test_async_failure_is_retried_too(app, start_worker):
    @app.task(name="t.async_flaky", max_attempts=2, retry_backoff="20ms")
    async def async_flaky(ctx: Context) -> int:
        await asyncio.sleep(0)
        if ctx.attempt == 1:
            raise RuntimeError("first async attempt fails")
        return ctx.attempt

    start_worker()
    assert async_flaky.submit().wait(timeout=60) == 2


def test_sync_task_longer_than_its_timeout_fails_with_a_timeout(app, start_worker):
    @app.task(name="t.sleepy", timeout="300ms")
    def sleepy() -> str:
        time.sleep(3)
        return "too late"

    start_worker()
    handle = sleepy.submit()
    with pytest.raises(RunFailed) as caught:
        handle.wait(timeout=30)
    assert "Timeout" in caught.value.error
    assert handle.status() is RunStatus.FAILED


def test_async_task_longer_than_its_timeout_fails_with_a_timeout(app, start_worker):
    finished, cancelled = [], threading.Event()

    @app.task(name="t.async_sleepy", timeout="300ms")
    async def async_sleepy() -> str:
        try:
            await asyncio.sleep(3)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        finished.append(True)
        return "too late"

    start_worker()
    handle = async_sleepy.submit()
    with pytest.raises(RunFailed) as caught:
        handle.wait(timeout=30)
    assert "Timeout" in caught.value.error
    assert cancelled.wait(30), "the coroutine was left to run on, not cancelled"
    assert finished == []


def test_a_timed_out_attempt_is_retried_when_attempts_remain(app, start_worker):
    @app.task(name="t.slow_first", timeout="300ms", max_attempts=2, retry_backoff="20ms")
    def slow_first(ctx: Context) -> int:
        if ctx.attempt == 1:
            time.sleep(2)
        return ctx.attempt

    start_worker()
    handle = slow_first.submit()
    assert handle.wait(timeout=30) == 2
    assert "RunRetried" in event_types(app, handle.id)


def test_cancel_a_queued_run_is_immediate(app):
    @app.task(name="t.never")
    def never():
        return 1

    handle = never.submit()
    other = never.submit()
    assert handle.cancel() is RunStatus.CANCELED
    assert handle.status() is RunStatus.CANCELED
    with pytest.raises(RunCanceled):
        handle.wait(timeout=5)
    assert event_types(app, handle.id)[-1] == "RunCanceled"
    assert other.status() is RunStatus.QUEUED  # only that run
    assert handle.cancel() is RunStatus.CANCELED  # idempotent


def test_a_canceled_queued_run_is_never_executed(app, start_worker):
    ran = []

    @app.task(name="t.record")
    def record(x: int) -> int:
        ran.append(x)
        return x

    doomed = record.submit(x=1)
    doomed.cancel()
    kept = record.submit(x=2)
    start_worker()
    assert kept.wait(timeout=30) == 2
    assert ran == [2]
    assert doomed.status() is RunStatus.CANCELED


def test_cancel_a_running_sync_task_that_watches_its_context(app, start_worker):
    started = threading.Event()
    observed = []

    @app.task(name="t.loop_until_cancelled")
    def loop(ctx: Context) -> str:
        started.set()
        deadline = time.monotonic() + 60
        while not ctx.cancelled and time.monotonic() < deadline:
            time.sleep(0.02)
        observed.append(ctx.cancelled)
        return "stopped"

    start_worker()
    handle = loop.submit()
    assert started.wait(30)
    wait_status(app, handle.id, RunStatus.RUNNING)
    assert handle.cancel() in (RunStatus.RUNNING, RunStatus.CANCELED)
    with pytest.raises(RunCanceled):
        handle.wait(timeout=20)
    assert observed == [True]  # it stopped because it was told, cooperatively
    assert handle.info().result is None
    assert event_types(app, handle.id)[-1] == "RunCanceled"


def test_cancel_a_running_async_task_awaiting_a_long_sleep(app, start_worker, monkeypatch):
    monkeypatch.setenv("TIDEGATE_CANCEL_GRACE", "300ms")  # the sleep ignores the cancel: stopped at the grace
    started = threading.Event()
    finished = []

    @app.task(name="t.async_long")
    async def async_long() -> str:
        started.set()
        await asyncio.sleep(30)
        finished.append(True)
        return "slept"

    start_worker()
    handle = async_long.submit()
    assert started.wait(30)
    wait_status(app, handle.id, RunStatus.RUNNING)
    handle.cancel()
    with pytest.raises(RunCanceled):
        handle.wait(timeout=20)  # well under the 30 s sleep
    assert finished == []
    assert event_types(app, handle.id)[-1] == "RunCanceled"


def test_cancel_a_running_sync_task_that_ignores_its_context(app, start_worker, monkeypatch):
    """Past the cancel grace the worker stops the thread itself and frees its slot."""
    monkeypatch.setenv("TIDEGATE_CANCEL_GRACE", "300ms")
    started = threading.Event()
    finished = []

    @app.task(name="t.stubborn")
    def stubborn() -> str:
        started.set()
        for _ in range(1500):  # 30 s, in small sleeps so an interrupt can land
            time.sleep(0.02)
        finished.append(True)
        return "ignored the cancel"

    worker = start_worker(max_workers=2)
    handle = stubborn.submit()
    assert started.wait(30)
    wait_status(app, handle.id, RunStatus.RUNNING)
    handle.cancel()
    with pytest.raises(RunCanceled):
        handle.wait(timeout=20)
    wait_until(lambda: worker.in_flight == 0, 20, message="the interrupted thread to give its slot back")
    assert finished == []


def test_cancel_reaches_a_worker_whose_every_slot_is_busy(app, start_worker):
    """A full worker (max_workers=1, one run in flight) must still learn that its run was canceled."""
    started = threading.Event()

    @app.task(name="t.cooperative")
    def cooperative(ctx: Context) -> str:
        started.set()
        ctx.wait_cancelled_sync(60)
        return "stopped"

    start_worker(max_workers=1)
    handle = cooperative.submit()
    assert started.wait(30)
    # the worker has reported the start: it now has nothing to report and no free slot
    wait_until(lambda: handle.info().started_at is not None, 30, message="the start to be recorded")
    time.sleep(0.2)
    handle.cancel()
    with pytest.raises(RunCanceled):
        handle.wait(timeout=20)


def test_an_async_task_awaiting_its_cancellation_ends_canceled(app, start_worker):
    started = threading.Event()

    @app.task(name="t.async_cooperative")
    async def async_cooperative(ctx: Context) -> str:
        started.set()
        await ctx.wait_cancelled()
        return "noticed"

    start_worker()
    handle = async_cooperative.submit()
    assert started.wait(30)
    wait_status(app, handle.id, RunStatus.RUNNING)
    handle.cancel()
    with pytest.raises(RunCanceled):
        handle.wait(timeout=20)


def test_a_cancel_requested_while_running_is_not_undone_by_a_retry(app):
    """The user asked to cancel; the attempt then failed with retries left. It must not run again.

    (Hand-back and the sweeper both end such a run canceled; reporting a
    failure must not silently clear the request and re-queue it.)
    """
    from tidegate.domain.model import Outcome, OutcomeKind

    @app.task(name="t.cancel_vs_retry", queue="cvr", max_attempts=3)
    def cancel_vs_retry() -> None:
        raise RuntimeError("fails")

    store = app.store
    handle = cancel_vs_retry.submit()
    [run] = store.cycle(CycleRequest("worker-A", ["cvr"], [], [], 1, 30)).claimed
    assert handle.cancel() is RunStatus.RUNNING
    assert handle.info().cancel_requested
    # the attempt failed before its worker read the cancel request
    result = store.cycle(
        CycleRequest(
            "worker-A",
            ["cvr"],
            [],
            [Outcome(run.id, 1, OutcomeKind.FAILED, error="RuntimeError: fails", retry_delay=0.0)],
            1,
            30,
        )
    )
    assert result.fenced_out == []
    assert result.claimed == [], "a run whose cancel was requested was claimed again"
    assert handle.status() is RunStatus.CANCELED
