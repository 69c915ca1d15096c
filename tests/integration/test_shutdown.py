"""Graceful stop: in-flight runs finish within the grace period, or are handed back uncounted."""

import asyncio
import os
import signal
import subprocess
import threading
import time

import pytest

from tests.apps.counted import make_app
from tests.thread_gate import ThreadGate
from tidegate import Context, RunStatus

from .conftest import event_types, read_execution_log, wait_status, wait_until


def test_a_short_grace_hands_the_running_run_back_without_consuming_an_attempt(app, start_worker):
    started = threading.Event()
    interrupted = []

    @app.task(name="t.long_job", max_attempts=2)
    def long_job(ctx: Context) -> str:
        if ctx.attempt == 1:
            started.set()
            try:
                for _ in range(3000):
                    time.sleep(0.01)
            except BaseException as error:
                interrupted.append(type(error).__name__)
                raise
            return "first attempt finished (it should have been handed back)"
        return f"attempt {ctx.attempt}"

    worker = start_worker()
    handle = long_job.submit()
    assert started.wait(30)
    wait_status(app, handle.id, RunStatus.RUNNING)
    before = handle.info()
    worker.stop(timeout=30, grace=0.2)
    assert worker.join(1)

    record = handle.info()
    assert record.status is RunStatus.QUEUED
    assert record.worker_id is None and record.lease_expires_at is None
    # the handed-back attempt is not counted: as many attempts remain as before it started
    assert record.max_attempts - record.attempt == before.max_attempts - before.attempt + 1
    events = app.store.run_events(handle.id)
    requeued = [e for e in events if e.type == "RunRequeued"]
    assert len(requeued) == 1 and requeued[0].metadata["reason"] == "worker shutting down"
    assert "RunFailed" not in [e.type for e in events] and "RunRetried" not in [e.type for e in events]

    # the run is not lost: the next worker runs it to completion
    second = start_worker()
    assert handle.wait(timeout=30) == "attempt 2"
    assert second is not worker
    assert interrupted  # the first attempt's code was actually stopped


def test_a_handed_back_run_with_one_attempt_can_still_run(app, start_worker):
    """max_attempts=1: had the hand-back counted, the next claim could never complete it."""
    started = threading.Event()

    @app.task(name="t.once", max_attempts=1)
    def once(ctx: Context) -> int:
        if ctx.attempt == 1:
            started.set()
            ctx.wait_cancelled_sync(60)
            return -1
        return ctx.attempt

    worker = start_worker()
    handle = once.submit()
    assert started.wait(30)
    wait_status(app, handle.id, RunStatus.RUNNING)
    worker.stop(timeout=30, grace=0.1)
    assert handle.status() is RunStatus.QUEUED
    start_worker()
    assert handle.wait(timeout=30) == 2


def test_a_long_grace_lets_in_flight_runs_finish_and_claims_nothing_new(app, start_worker):
    started = threading.Event()
    release = ThreadGate()

    @app.task(name="t.finish_me")
    def finish_me(n: int) -> int:
        started.set()
        release.wait(30)
        time.sleep(0.3)
        return n

    @app.task(name="t.async_finish_me")
    async def async_finish_me(n: int) -> int:
        assert await release.wait_async(60)
        await asyncio.sleep(0.3)
        return n

    worker = start_worker(max_workers=2)
    first = finish_me.submit(n=1)
    second = async_finish_me.submit(n=2)
    assert started.wait(30)
    wait_status(app, first.id, RunStatus.RUNNING)
    wait_status(app, second.id, RunStatus.RUNNING)
    worker.request_stop(grace=60)
    time.sleep(0.3)
    late = finish_me.submit(n=3)  # submitted while the worker is stopping: not for it
    release.set()
    worker.stop(timeout=60, grace=60)
    assert worker.join(1)

    assert first.wait(timeout=5) == 1
    assert second.wait(timeout=5) == 2
    for handle in (first, second):
        types = event_types(app, handle.id)
        assert "RunRequeued" not in types and types[-1] == "RunCompleted"
    assert late.status() is RunStatus.QUEUED
    assert late.info().attempt == 0


def test_stop_with_nothing_running_is_prompt_and_clean(app, start_worker):
    @app.task(name="t.idle")
    def idle() -> None:
        return None

    worker = start_worker()
    worker.stop(timeout=30, grace=60)
    assert worker.join(1)
    assert worker.in_flight == 0


@pytest.mark.slow
@pytest.mark.parametrize("seconds", [0.02, 20.0], ids=["interruptible", "one-long-sleep"])
def test_sigterm_hands_back_in_flight_runs_and_the_process_exits(database_url, worker_processes, tmp_path, seconds):
    """`worker.run()` in a process: SIGTERM with a short grace hands the run back and exits cleanly.

    A sync task blocked in one long C call (time.sleep(20)) cannot be interrupted; the
    run is handed back all the same, and the process must still exit within the grace
    (not wait for the abandoned thread).
    """
    log = tmp_path / "executions.log"
    env = {"TIDEGATE_SHUTDOWN_GRACE": "300ms", "TIDEGATE_TEST_LOG": str(log)}
    with make_app(database_url) as app:
        work = app.tasks["counted.work"]
        handle = work.submit(n=1, seconds=seconds) if seconds > 1 else work.submit(n=1, seconds=0.0, chunks=1000)
        process = worker_processes.spawn("tests.apps.counted:app", database_url, max_workers=2, env=env)
        wait_until(lambda: read_execution_log(log), 60, message="the run to start in the worker process")
        wait_status(app, handle.id, RunStatus.RUNNING)
        os.kill(process.pid, signal.SIGTERM)
        wait_status(app, handle.id, RunStatus.QUEUED, timeout=30)  # handed back
        requeued = [e for e in app.store.run_events(handle.id) if e.type == "RunRequeued"]
        assert [e.metadata["reason"] for e in requeued] == ["worker shutting down"]
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pytest.fail(
                "the run was handed back, but the worker process did not exit within 10 s of SIGTERM "
                "(grace 300ms): it waits for the abandoned task thread"
            )
        assert process.returncode == 0, worker_processes.output(process)
        assert handle.status() is RunStatus.QUEUED
