"""Workflows whose steps log their execution intervals (`tests.apps.steplog`): `tests.apps.workflows:app`.

The worker processes of tests/process/test_workflow_processes.py run it; the test
process builds the same definitions with `make_app(its url)`.
"""

from __future__ import annotations

import asyncio
import os
import time

import tidegate
from tests.apps.steplog import log_line
from tidegate import Executor, Workflow

HELD_POOL = "held"


def make_app(database: str | None = None) -> tidegate.App:
    app = tidegate.App(database)

    @app.step
    async def item(job: dict, log: str) -> int:
        """A map item that sleeps `job["seconds"]`; a cancel (hand-back) logs it abandoned."""
        n = job["n"]
        log_line(log, "start", "item", n)
        try:
            await asyncio.sleep(job["seconds"])
        except asyncio.CancelledError:
            log_line(log, "abandoned", "item", n)
            raise
        log_line(log, "end", "item", n)
        return n * n

    @app.workflow(name="wf.window", queue="wf", max_attempts=3, executor=Executor.parallel(max_async_concurrent=50))
    def window(wf: Workflow, log: str, durations: list[float], concurrency: int):
        jobs = [{"n": n, "seconds": seconds} for n, seconds in enumerate(durations)]
        return wf.map(item, jobs, concurrency=concurrency, log=log)

    @app.step
    def prepare(log: str) -> str:
        log_line(log, "start", "prepare", 0)
        log_line(log, "end", "prepare", 0)
        return "prepared"

    @app.step(pool=HELD_POOL)
    async def hold(job: dict, marker: str, prepared: str) -> int:
        """Holds its pool slot for a long time while `marker` exists (the attempt the test kills)."""
        log_line(job["log"], "start", "hold", job["n"])
        if await asyncio.to_thread(os.path.exists, marker):
            await asyncio.sleep(60)
        log_line(job["log"], "end", "hold", job["n"])
        return job["n"]

    @app.workflow(name="wf.held", queue="wf", max_attempts=3, executor=Executor.parallel(max_async_concurrent=8))
    def held(wf: Workflow, log: str, marker: str, jobs: int):
        prepared = wf.step(prepare, log)
        return wf.map(hold, [{"log": log, "n": n} for n in range(jobs)], marker=marker, prepared=prepared)

    @app.step
    def stuck(log: str) -> int:
        """A sync step in a pool process that outlives any grace period."""
        log_line(log, "start", "stuck", 0)
        time.sleep(60)
        return 0

    @app.workflow(name="wf.stuck", queue="wf", executor=Executor.parallel(max_workers=1))
    def stuck_workflow(wf: Workflow, log: str):
        return wf.step(stuck, log)

    return app


app = make_app()
