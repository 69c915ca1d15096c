"""`ctx.workdir`: a scratch directory of one attempt alone, removed when the attempt ends.

Two attempts of one run (a retry) never share files, and nothing is left
behind whether the attempt completed, failed or was canceled.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from tidegate import Context, RunStatus

from .conftest import wait_until


def _gone(path: Path) -> bool:
    return not path.exists()


def test_each_attempt_of_a_retried_run_gets_its_own_workdir_removed_afterwards(app, start_worker):
    seen: list[tuple[int, Path, bool]] = []

    @app.task(name="wd.retry", queue="wd", max_attempts=2, retry_backoff="10ms")
    def retry(ctx: Context) -> str:
        workdir = ctx.workdir
        fresh = workdir.is_dir() and not any(workdir.iterdir())
        seen.append((ctx.attempt, workdir, fresh))
        assert ctx.workdir == workdir  # stable within the attempt
        (workdir / "scratch.txt").write_text(f"attempt {ctx.attempt}")
        if ctx.attempt == 1:
            raise RuntimeError("the first attempt fails")
        return str(workdir)

    start_worker(app, queues=["wd"], max_workers=1)
    handle = retry.submit()
    result = handle.wait(timeout=30)
    assert [(attempt, fresh) for attempt, _, fresh in seen] == [(1, True), (2, True)]
    first, second = seen[0][1], seen[1][1]
    assert first != second, "two attempts of one run shared a workdir"
    assert result == str(second)
    wait_until(lambda: _gone(first) and _gone(second), 30, message="both workdirs to be removed")


def test_concurrent_runs_get_distinct_workdirs(app, start_worker):
    barrier = threading.Barrier(3)
    paths: list[Path] = []

    @app.task(name="wd.together", queue="wd")
    def together(ctx: Context) -> str:
        paths.append(ctx.workdir)
        (ctx.workdir / "mine").write_text(ctx.run_id)
        barrier.wait(30)  # all three alive at once
        assert (ctx.workdir / "mine").read_text() == ctx.run_id
        return str(ctx.workdir)

    start_worker(app, queues=["wd"], max_workers=3)
    handles = together.submit_many([{}, {}, {}])
    results = [handle.wait(timeout=30) for handle in handles]
    assert len(set(results)) == 3 and len(set(paths)) == 3
    wait_until(lambda: all(_gone(path) for path in paths), 30, message="the workdirs to be removed")


def test_the_workdir_of_an_async_attempt_is_removed(app, start_worker):
    paths: list[Path] = []

    @app.task(name="wd.async", queue="wd")
    async def in_loop(ctx: Context) -> bool:
        paths.append(ctx.workdir)
        (ctx.workdir / "a").write_text("x")
        await asyncio.sleep(0.01)
        return ctx.workdir.is_dir()

    start_worker(app, queues=["wd"])
    assert in_loop.submit().wait(timeout=30) is True
    wait_until(lambda: _gone(paths[0]), 30, message="the workdir to be removed")


def test_the_workdir_of_a_canceled_attempt_is_removed(app, start_worker):
    paths: list[Path] = []
    ready = threading.Event()

    @app.task(name="wd.cancel", queue="wd")
    def stuck(ctx: Context) -> None:
        paths.append(ctx.workdir)
        (ctx.workdir / "partial").write_text("half done")
        ready.set()
        ctx.wait_cancelled_sync(30)
        ctx.raise_if_cancelled()

    start_worker(app, queues=["wd"])
    handle = stuck.submit()
    assert ready.wait(30)
    handle.cancel()
    wait_until(lambda: handle.status() is RunStatus.CANCELED, 30, message="the run to be canceled")
    wait_until(lambda: _gone(paths[0]), 30, message="the canceled attempt's workdir to be removed")
