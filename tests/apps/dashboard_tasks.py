"""The app behind the dashboard's browser tests: `tests.apps.dashboard_tasks:app`.

Every task holds until its gate file exists, so a test decides when a run (or
a pool slot) is released: `gated` lets one run at a time (the others wait,
blocked, in claim order), `trickle` too (the limits test raises it), and each
`gpu.job` run holds one slot of the pool `gpu` (3 slots) in its one step.
A `family.parent` run triggers one `family.child` (same queue, limit 2) and waits
for it; `capped` admits one active run (`max_active=1`), and `capped.boom` fails
at once, so an operator's retry of it meets that ceiling. `etl.diamond` is a
diamond (extract, then a map `shard` and a step `audit` both on its rows, then
`load` of both): items from `held` on wait for the gate. The schedule
`new-year` (once a year, Paris time) never fires during a test. `rated.hold` runs in
queue `rated`, 2 starts a minute with burst 1 (a second run waits 30 s for the rate), and
`warehouse.load` runs one step that pays the named rate `warehouse_api` (30 a minute): the
pages that show rates have one of each kind to show.
"""

from __future__ import annotations

import asyncio
import os
import time

import tidegate
from tidegate import Concurrency, Executor, Rate, Workflow

GPU_SLOTS = 3


def wait_for(gate: str) -> None:
    while not os.path.exists(gate):
        time.sleep(0.02)


def make_app(database: str | None = None) -> tidegate.App:
    app = tidegate.App(database)
    app.queue("gated", concurrency=Concurrency(global_limit=1))
    app.queue("trickle", concurrency=Concurrency(global_limit=1))
    app.queue("family", concurrency=Concurrency(global_limit=2))
    app.queue("capped", max_active=1)

    @app.task(name="gated.hold", queue="gated")
    def hold(gate: str) -> str:
        wait_for(gate)
        return "released"

    @app.task(name="trickle.hold", queue="trickle")
    def trickle(gate: str) -> str:
        wait_for(gate)
        return "released"

    @app.task(name="family.child", queue="family")
    def child(gate: str) -> str:
        wait_for(gate)
        return "grown"

    @app.task(name="family.parent", queue="family")
    def parent(ctx: tidegate.Context, gate: str) -> str:
        return f"parent of {ctx.trigger_and_wait(child, gate=gate)}"

    @app.task(name="capped.hold", queue="capped")
    def capped(gate: str) -> str:
        wait_for(gate)
        return "released"

    app.schedule(trickle, cron="0 3 1 1 *", timezone="Europe/Paris", args={"gate": "/never"}, name="new-year")

    @app.task(name="capped.boom", queue="capped")
    def boom(gate: str) -> str:
        raise RuntimeError(f"boom ({gate})")

    @app.step(pool="gpu")
    async def render(n: int, gate: str) -> int:
        await asyncio.to_thread(wait_for, gate)
        return n

    @app.workflow(name="gpu.job", queue="gpu", executor=Executor.parallel(max_async_concurrent=8))
    def gpu_job(wf: Workflow, n: int, gate: str):
        return wf.step(render, n, gate)

    add_diamond(app)
    add_rates(app)
    return app


def add_rates(app: tidegate.App) -> None:
    """A rated queue and a named rate paid by a step: their own function, so `make_app` stays one screen."""
    app.queue("rated", rate=Rate(limit=2, per="1m", burst=1))
    app.set_rate_limit("warehouse_api", 30, per="1m", burst=2)

    @app.task(name="rated.hold", queue="rated")
    def rated(gate: str) -> str:
        wait_for(gate)
        return "released"

    @app.step(rates={"warehouse_api": 1})
    async def fetch(gate: str) -> str:
        await asyncio.to_thread(wait_for, gate)
        return "fetched"

    @app.workflow(name="warehouse.load", queue="warehouse", executor=Executor.parallel(max_async_concurrent=8))
    def warehouse_load(wf: Workflow, gate: str):
        return wf.step(fetch, gate)


def add_diamond(app: tidegate.App) -> None:
    """`etl.diamond`: its own function, so `make_app` stays one screen."""

    @app.step()
    def extract(n: int) -> list[int]:
        return list(range(n))

    @app.step()
    def shard(row: int, gate: str, held: int) -> int:
        if row >= held:
            wait_for(gate)
        return row * 2

    @app.step()
    def audit(rows: list[int]) -> int:
        return len(rows)

    @app.step()
    def load(shards: list[int], count: int) -> int:
        return sum(shards) + count

    @app.workflow(name="etl.diamond", queue="etl")
    def diamond(wf: Workflow, n: int, gate: str, held: int):
        rows = wf.step(extract, n)
        return wf.step(load, wf.map(shard, rows, gate=gate, held=held), wf.step(audit, rows))


app = make_app()
