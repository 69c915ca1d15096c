"""A gated task for the backpressure tests, importable as `tests.apps.backpressure:app`.

`bp.gated` logs `start|end <run id> <attempt> <unix time>` to `$TIDEGATE_TEST_LOG`
(one O_APPEND write per line, so concurrent processes never interleave) and
holds its slot until the file `$TIDEGATE_TEST_GATE` exists (no gate variable:
it returns at once). Queue `bp` has an admission ceiling of `CEILING` runs.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import tidegate
from tidegate import Context

CEILING = 15
QUEUE = "bp"
GATE_GIVE_UP = 60.0  # a gate never opened (a failed test) must not hang the worker forever


def log_line(kind: str, ctx: Context) -> None:
    path = os.environ.get("TIDEGATE_TEST_LOG")
    if not path:
        return
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{kind} {ctx.run_id} {ctx.attempt} {time.time():.6f}\n".encode())
    finally:
        os.close(fd)


def gate_open() -> bool:
    gate = os.environ.get("TIDEGATE_TEST_GATE")
    return gate is None or os.path.exists(gate)


def read_intervals(path: str | os.PathLike[str]) -> dict[tuple[str, int], list[float]]:
    """`(run id, attempt) -> [start, end]` from the log (end missing if it never ended)."""
    intervals: dict[tuple[str, int], list[float]] = {}
    if not os.path.exists(path):
        return intervals
    with open(path) as file:
        for line in file:
            if not line.strip():
                continue
            _kind, run_id, attempt, at = line.split()
            intervals.setdefault((run_id, int(attempt)), []).append(float(at))
    return intervals


def max_overlap(intervals: list[tuple[float, float]]) -> int:
    """The most intervals open at one instant (an end at t closes before a start at t opens)."""
    points = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    running = peak = 0
    for _, delta in points:
        running += delta
        peak = max(peak, running)
    return peak


@contextmanager
def running_workers(app: tidegate.App, *options: dict[str, Any]) -> Iterator[list[tidegate.Worker]]:
    """In-thread workers of `app`, stopped (and joined) on leaving, so before the app's store closes.

    Closing an App closes its SQLite connections, which a still-running
    worker thread may be using: workers must never outlive their app.
    """
    workers: list[tidegate.Worker] = []
    try:
        for option in options:
            worker = app.worker(**option).start()
            workers.append(worker)
            assert not worker.join(0), "the worker stopped as it started (its error is logged)"
        yield workers
    finally:
        for worker in workers:
            worker.stop(timeout=30, grace=0)
        for worker in workers:
            assert worker.join(30), "a worker did not stop within 30s"


def make_app(database: str | None = None) -> tidegate.App:
    app = tidegate.App(database)
    app.queue(QUEUE, max_active=CEILING)

    @app.task(name="bp.gated", queue=QUEUE)
    def gated(ctx: Context, n: int) -> int:
        log_line("start", ctx)
        try:
            give_up = time.monotonic() + GATE_GIVE_UP
            while not gate_open() and not ctx.cancelled and time.monotonic() < give_up:
                time.sleep(0.01)
        finally:
            log_line("end", ctx)
        return n

    return app


app = make_app()
