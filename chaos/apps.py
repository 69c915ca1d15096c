"""The chaos suite's app: tasks under every kind of limit that log what they execute.

Every execution appends JSON lines `{"kind": "start"|"end", "run", "attempt",
"step", "pid", "t", "scopes"}` to `$CHAOS_LOG` with one O_APPEND write each, so
lines of concurrent processes never interleave and a SIGKILL leaves a start
without an end. `t` is `time.monotonic()`: one clock for every process on the
machine, which the clock-skew scenario leaves alone (it shifts the wall clock).
`scopes` are the limited scopes the execution counts in, so the history
checker can sweep each one without knowing the app.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid
from typing import Any

import tidegate
from tidegate import Concurrency, Context, Executor, Partition, RunQueueConfig, Workflow
from tidegate import TagConcurrencyLimit as TagLimit

GLOBAL_CAP = 6
PARTITIONS = 3  # arg `p` of storm runs takes values 0..PARTITIONS-1
PARTITION_LIMIT = 2
GOLD_LIMIT = 2  # tag tier=gold
POOL = "chaos"
POOL_LIMIT = 2
POOL_LEASE = "2s"

LIMITS = {"global": GLOBAL_CAP, "tag:tier=gold": GOLD_LIMIT, f"pool:{POOL}": POOL_LIMIT} | {
    f"queue:storm/p={p}": PARTITION_LIMIT for p in range(PARTITIONS)
}


def log(kind: str, run: str, attempt: int, scopes: list[str], step: str | None = None) -> None:
    record = {
        "kind": kind,
        "run": run,
        "attempt": attempt,
        "step": step,
        "pid": os.getpid(),
        "t": time.monotonic(),
        "scopes": scopes,
    }
    fd = os.open(os.environ["CHAOS_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, (json.dumps(record) + "\n").encode())
    finally:
        os.close(fd)


def _sleep_logged(ctx: Context, scopes: list[str], ms: int) -> None:
    try:
        # Inside the try: the worker stops a thread's attempt by raising in it, at any bytecode;
        # raised just after the start was written, it must still log the end (an end without a
        # start, raised before the write, is ignored by the checker).
        log("start", ctx.run_id, ctx.attempt, scopes)
        time.sleep(ms / 1000)
    finally:  # an attempt the worker stops (lease lost, timeout) ends here too: its real end
        log("end", ctx.run_id, ctx.attempt, scopes)


def make_app(database: str | None = None) -> tidegate.App:
    app = tidegate.App(
        database,
        run_queue=RunQueueConfig(
            max_concurrent_runs=GLOBAL_CAP,
            tag_concurrency_limits=[TagLimit(key="tier", value="gold", limit=GOLD_LIMIT)],
        ),
    )
    app.queue("storm", concurrency=Concurrency(global_limit=PARTITION_LIMIT, partition=Partition(by_args=["p"])))
    app.queue("flows")
    app.queue("poison")

    @app.task(name="chaos.sleep", queue="storm", max_attempts=1000, retry_backoff="10ms")
    def sleep(ctx: Context, p: int, ms: int) -> int:
        _sleep_logged(ctx, ["global", f"queue:storm/p={p}"], ms)
        return p

    @app.task(name="chaos.gold", queue="storm", tags={"tier": "gold"}, max_attempts=1000, retry_backoff="10ms")
    def gold(ctx: Context, p: int, ms: int) -> int:
        _sleep_logged(ctx, ["global", f"queue:storm/p={p}", "tag:tier=gold"], ms)
        return p

    @app.step(pool=POOL)
    async def pooled(item: dict[str, Any]) -> int:
        """Holds a pool slot while it sleeps. A step does not know its run, so each execution
        logs under a fresh id of its own: the checker only sweeps the pool over them."""
        execution = uuid.uuid4().hex
        log("start", execution, 0, [f"pool:{POOL}"], step=f"pooled[{item['n']}]")
        try:
            await asyncio.sleep(item["ms"] / 1000)
        finally:  # a step stopped under it (slots lost, cancel) ends here too
            log("end", execution, 0, [f"pool:{POOL}"], step=f"pooled[{item['n']}]")
        return int(item["n"])

    @app.workflow(
        name="chaos.flow",
        queue="flows",
        max_attempts=1000,
        retry_backoff="10ms",
        executor=Executor.parallel(max_async_concurrent=8),
    )
    def flow(wf: Workflow, items: int, ms: int) -> Any:
        return wf.map(pooled, [{"n": n, "ms": ms} for n in range(items)], concurrency=items)

    @app.task(name="chaos.poison", queue="poison", max_attempts=3, retry_backoff="10ms")
    def poison(ctx: Context) -> None:
        """Kills its own process on every attempt."""
        log("start", ctx.run_id, ctx.attempt, [])
        time.sleep(0.2)
        os._exit(1)

    @app.task(name="chaos.quick", queue="poison", max_attempts=3, retry_backoff="10ms")
    def quick(ctx: Context, ms: int) -> str:
        _sleep_logged(ctx, [], ms)
        return "ok"

    return app
