"""A poison task that kills its own worker process on every attempt, and quick innocent ones.

Every execution appends `start|end <run id> <attempt> <pid> <time>` to
`$TIDEGATE_TEST_LOG` (one O_APPEND write per line), so a test can tell
which runs shared a worker process with the poison when it died.
"""

from __future__ import annotations

import os
import time

import tidegate
from tidegate import Context


def _log(kind: str, ctx: Context) -> None:
    line = f"{kind} {ctx.run_id} {ctx.attempt} {os.getpid()} {time.time():.6f}\n"
    fd = os.open(os.environ["TIDEGATE_TEST_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def make_app(database: str | None = None) -> tidegate.App:
    """Both tasks take max_attempts=3, as in the defect report."""
    app = tidegate.App(database)
    app.task(name="poison.crash", queue="poison", max_attempts=3)(crash)
    app.task(name="poison.quick", queue="poison", max_attempts=3)(quick)
    return app


def crash(ctx: Context) -> None:
    _log("start", ctx)
    time.sleep(0.1)  # let the runs claimed beside it start too
    os._exit(1)


def quick(ctx: Context, n: int) -> int:
    _log("start", ctx)
    time.sleep(0.3)
    _log("end", ctx)
    return n


app = make_app()
