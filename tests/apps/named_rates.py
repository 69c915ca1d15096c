"""A named step rate shared with a pool across worker processes: `tests.apps.named_rates:app`.

The worker processes of `tests/process/test_named_rates_processes.py` run it. Each `load` step
appends `start|end <run id> <item> <t>` to the file it is given (one O_APPEND write per line),
`t` read from the database's clock (`tests.apps.rates.database_time`). Every step pays the rate
`warehouse_api` (6 starts per second, burst 2: one start every 0.2 s once the burst is spent) and
holds a slot of the pool `warehouse_db` (2 slots) for 0.3 s, so the rate binds at a steady pace and
the pool fills after each burst.

With `$TIDEGATE_TEST_SPLIT_STEP_RATES` set, a step takes its pool slots in one transaction and
its rate tokens in another (`PoolGuard._try` replaced): the mutation of the all-or-none claim that
the proof must catch, as a step that holds a slot while it waits for the rate.
"""

from __future__ import annotations

import asyncio
import os

import tidegate
from tests.apps.rates import database_time
from tidegate import Executor, Workflow
from tidegate.domain.steps import SlotGrant, SlotRequest
from tidegate.engine.runtime import pools

RATE = "warehouse_api"
POOL = "warehouse_db"
LIMIT, PER, BURST = 6, 1.0, 2
POOL_SLOTS = 2
STEP_SECONDS = 0.3


if os.environ.get("TIDEGATE_TEST_SPLIT_STEP_RATES"):

    async def _split_try(self, fence, worker_id, step_key, needs, fixed_limits, rates):  # type: ignore[no-untyped-def]
        """The mutation: the slots first, then the tokens, each in a transaction of its own."""
        store = self._store
        slots = await asyncio.to_thread(
            store.acquire_slots, fence, worker_id, SlotRequest(step_key, needs, fixed_limits)
        )
        if not slots.granted or not rates:
            return slots
        paid = await asyncio.to_thread(store.acquire_slots, fence, worker_id, SlotRequest(step_key, {}, {}, rates))
        return slots if paid.granted else SlotGrant(False, rate_wait=paid.rate_wait)

    pools.PoolGuard._try = _split_try  # type: ignore[method-assign]


def _log(path: str, line: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def make_app(database: str | None = None) -> tidegate.App:
    app = tidegate.App(database)
    app.set_rate_limit(RATE, LIMIT, per=PER, burst=BURST)
    app.set_pool_limit(POOL, POOL_SLOTS, lease_duration="1m")

    @app.step(rates={RATE: 1}, pool=POOL)
    async def load(job: dict) -> int:
        url = os.environ["TIDEGATE_DATABASE"]
        _log(job["log"], f"start {job['run']} {job['n']} {await asyncio.to_thread(database_time, url):.6f}")
        await asyncio.sleep(STEP_SECONDS)
        _log(job["log"], f"end {job['run']} {job['n']} {await asyncio.to_thread(database_time, url):.6f}")
        return job["n"]

    @app.workflow(name="wf.rated", queue="rated", executor=Executor.parallel(max_async_concurrent=8))
    def rated(wf: Workflow, log: str, run: int, items: int):
        return wf.map(load, [{"log": log, "run": run, "n": n} for n in range(items)], concurrency=4)

    return app


app = make_app()
