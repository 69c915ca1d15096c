"""Trees of runs that wait on their children, logging when each attempt executes (issue 13).

`tests.apps.trees:app` is what the worker processes of
`tests/process/test_children_processes.py` run. A `trees.node` of depth > 1
batch-waits on children one level down; a depth 1 node is a leaf that sleeps.
Each execution appends `start|end <run id> <attempt> <t>` to
`$TIDEGATE_TEST_LOG` (one O_APPEND write per line; `t` is `time.monotonic()`,
one clock for every process on the machine). A node logs `end` before every
trigger that may end its attempt waiting (the store frees its slots in that
call) and `start` again if the trigger returned, so its intervals lie inside
the times it held its slots: the overlap they show can only under-count.
"""

from __future__ import annotations

import os
import time

import tidegate
from tidegate import Concurrency, Context, RunQueueConfig, TagConcurrencyLimit

GLOBAL_CAP = 6
TREES_LIMIT = 3  # queue `trees`: every inner node
HEAVY_LIMIT = 2  # tag kind=heavy: some leaves


def _log(kind: str, ctx: Context) -> None:
    path = os.environ["TIDEGATE_TEST_LOG"]
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{kind} {ctx.run_id} {ctx.attempt} {time.monotonic():.6f}\n".encode())
    finally:
        os.close(fd)


def make_app(database: str | None = None) -> tidegate.App:
    app = tidegate.App(
        database,
        run_queue=RunQueueConfig(
            max_concurrent_runs=GLOBAL_CAP,
            tag_concurrency_limits=[TagConcurrencyLimit(key="kind", value="heavy", limit=HEAVY_LIMIT)],
        ),
    )
    app.queue("trees", concurrency=Concurrency(global_limit=TREES_LIMIT))
    app.queue("leaves")

    @app.task(name="trees.leaf", queue="leaves", max_attempts=5, retry_backoff="50ms")
    def leaf(ctx: Context, n: int, seconds: float) -> int:
        _log("start", ctx)
        time.sleep(seconds)
        _log("end", ctx)
        return n

    @app.task(name="trees.node", queue="trees", max_attempts=5, retry_backoff="50ms")
    def node(ctx: Context, n: int, depth: int, width: int, seconds: float) -> int:
        _log("start", ctx)
        if depth <= 1:
            time.sleep(seconds)
            _log("end", ctx)
            return n
        if depth == 2:  # one heavy leaf first (a tag limit), then the others together: two waits
            args = [{"n": n * 10 + i, "seconds": seconds} for i in range(width)]
            _log("end", ctx)
            results = [ctx.trigger_and_wait(leaf.options(tags={"kind": "heavy"}), **args[0])]
            _log("start", ctx)
            _log("end", ctx)
            results += ctx.batch_trigger_and_wait(leaf.options(tags={"kind": "light"}), args[1:])
        else:
            args = [{"n": n * 10 + i, "depth": depth - 1, "width": width, "seconds": seconds} for i in range(width)]
            _log("end", ctx)
            results = ctx.batch_trigger_and_wait(node, args)
        _log("start", ctx)
        _log("end", ctx)
        return sum(results)

    return app


app = make_app()
