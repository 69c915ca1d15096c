"""Tasks that log every execution to a side file (`$TIDEGATE_TEST_LOG`).

Each execution appends `start <run id> <attempt>` when it begins and
`end <run id> <attempt>` when it returns, each with one O_APPEND write, so
lines from concurrent processes never interleave and a SIGKILL leaves a
start without an end.
"""

from __future__ import annotations

import os
import time

import tidegate
from tidegate import Context


def _log(line: str) -> None:
    path = os.environ["TIDEGATE_TEST_LOG"]
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def make_app(database: str | None = None) -> tidegate.App:
    app = tidegate.App(database)

    @app.task(name="counted.work", queue="counted", max_attempts=10, retry_backoff="50ms")
    def work(ctx: Context, n: int, seconds: float = 0.0, chunks: int = 0, hold: str = "") -> int:
        """Sleep `seconds` in one call, then `chunks` x 20 ms (interruptible between chunks); first,
        while the file `hold` exists (the test removes it: an end the test orders, not a time)."""
        _log(f"start {ctx.run_id} {ctx.attempt}")
        while hold and os.path.exists(hold):
            time.sleep(0.02)
        if seconds:
            time.sleep(seconds)
        for _ in range(chunks):
            time.sleep(0.02)
        _log(f"end {ctx.run_id} {ctx.attempt}")
        return n

    @app.task(name="counted.ping", queue="counted")
    def ping(ctx: Context) -> str:
        _log(f"start {ctx.run_id} {ctx.attempt}")
        _log(f"end {ctx.run_id} {ctx.attempt}")
        return "pong"

    return app


app = make_app()
