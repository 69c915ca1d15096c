"""Run-level gates under load: an app whose tasks log their execution intervals.

`tests.apps.gates:app` is what the worker processes of
`tests/process/test_gates_processes.py` run. Each execution appends
`start <run id> <attempt> <t>` and `end <run id> <attempt> <t>` to
`$TIDEGATE_TEST_LOG` (one O_APPEND write per line, so processes never
interleave; `t` is `time.monotonic()`, one clock for every process on the
machine). From those intervals a test computes the largest number of runs of
each scope that were ever executing at once.

The declarations (queues, tag limits, global cap) are built by `make_app`, so
the test process and the workers agree on them exactly.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import tidegate
from tidegate import Concurrency, Context, Partition, RunQueueConfig, TagConcurrencyLimit

# The load test's declarations: every kind of run-level scope at once.
GLOBAL_CAP = 12
PARTITION_LIMIT = 2
REGION_LIMIT = 6  # per unique value of tag `region`
PROD_LIMIT = 5  # tag env=prod
HELD_LIMIT = 3  # queue `held` (the crash test)


def _log(line: str) -> None:
    path = os.environ["TIDEGATE_TEST_LOG"]
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def make_app(database: str | None = None) -> tidegate.App:
    app = tidegate.App(
        database,
        run_queue=RunQueueConfig(
            max_concurrent_runs=GLOBAL_CAP,
            tag_concurrency_limits=[
                TagConcurrencyLimit(key="region", per_unique_value=True, limit=REGION_LIMIT),
                TagConcurrencyLimit(key="env", value="prod", limit=PROD_LIMIT),
            ],
        ),
    )
    app.queue("proof", concurrency=Concurrency(global_limit=PARTITION_LIMIT, partition=Partition(by_args=["p"])))
    app.queue("held", concurrency=Concurrency(global_limit=HELD_LIMIT))

    @app.task(name="gates.work", queue="proof")
    def work(ctx: Context, p: int, ms: int) -> int:
        _log(f"start {ctx.run_id} {ctx.attempt} {time.monotonic():.6f}")
        time.sleep(ms / 1000)
        _log(f"end {ctx.run_id} {ctx.attempt} {time.monotonic():.6f}")
        return p

    @app.task(name="gates.hold", queue="held", max_attempts=3)
    def hold(ctx: Context, seconds: float) -> int:
        """Hold its slot for `seconds` on the first attempt only (the one a test kills)."""
        _log(f"start {ctx.run_id} {ctx.attempt} {time.monotonic():.6f}")
        if ctx.attempt == 1:
            time.sleep(seconds)
        _log(f"end {ctx.run_id} {ctx.attempt} {time.monotonic():.6f}")
        return ctx.attempt

    return app


app = make_app()


# --- reading the intervals back ---------------------------------------------------------------

Interval = tuple[float, float]


def read_intervals(path: Path) -> tuple[dict[tuple[str, int], Interval], set[tuple[str, int]]]:
    """(finished attempts -> (start, end), attempts that started and never ended)."""
    starts: dict[tuple[str, int], float] = {}
    ends: dict[tuple[str, int], float] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            if not line.strip():
                continue
            kind, run_id, attempt, at = line.split()
            (starts if kind == "start" else ends)[(run_id, int(attempt))] = float(at)
    finished = {key: (starts[key], ends[key]) for key in ends}
    return finished, set(starts) - set(ends)


def max_overlap(intervals: Iterable[Interval]) -> int:
    """The largest number of intervals open at one instant (an end at t frees before a start at t)."""
    points = []
    for start, end in intervals:
        points.append((start, 1))
        points.append((end, -1))
    points.sort(key=lambda point: (point[0], point[1]))
    current = peak = 0
    for _, step in points:
        current += step
        peak = max(peak, current)
    return peak


def overlap_by(
    intervals: Mapping[Hashable, Interval], scopes_of: Callable[[Hashable], Iterable[str]]
) -> dict[str, int]:
    """Max concurrency per scope, each interval counted in every scope `scopes_of` gives it."""
    grouped: dict[str, list[Interval]] = {}
    for key, interval in intervals.items():
        for scope in scopes_of(key):
            grouped.setdefault(scope, []).append(interval)
    return {scope: max_overlap(group) for scope, group in grouped.items()}


class Recorder:
    """In-process counterpart of the side file: tasks record their intervals here."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.intervals: dict[tuple[str, int], Interval] = {}
        self.started: list[str] = []  # run ids in the order they began executing
        self._open: dict[tuple[str, int], float] = {}

    @contextmanager
    def running(self, ctx: Context) -> Iterator[None]:
        key = (ctx.run_id, ctx.attempt)
        with self._lock:
            self._open[key] = time.monotonic()
            self.started.append(ctx.run_id)
        try:
            yield
        finally:
            with self._lock:
                self.intervals[key] = (self._open.pop(key), time.monotonic())

    def peak(self, run_ids: Iterable[str] | None = None) -> int:
        """Max concurrency among these runs (all runs when None)."""
        with self._lock:
            items = list(self.intervals.items())
        wanted = None if run_ids is None else set(run_ids)
        return max_overlap(interval for (run_id, _), interval in items if wanted is None or run_id in wanted)
