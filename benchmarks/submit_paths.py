"""Submit paths (issue 26), as ratios to the plain single submit measured in the same run.

Measured: the plain single submit (one after another), a unique submit with a new key each time,
a unique submit meeting its key's holder (a duplicate), a submit in the caller's transaction (its
own connection, one commit per submit), the plain submit from 16 threads, and the async submit
from one event loop with 16 concurrent tasks. Aims: unique and transactional >= 0.8 of plain;
async from 16 tasks >= 1.0 of sync from 16 threads. The paths take turns in blocks (ROUNDS of
them, --runs submits per path in all), each figure the median of its blocks.

    .venv/bin/python benchmarks/submit_paths.py --runs 2000 --repeat 3
"""

from __future__ import annotations

import asyncio
import itertools
import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg
from rich.console import Console

import tidegate
from common import fresh_database, measured_with, median, medians, parse_options, repeated, write_markdown

THREADS = 16
ROUNDS = 5  # each path measured in ROUNDS blocks, the paths taking turns: drift and load hit all alike


def measure(backend: str, runs: int) -> dict[str, float]:
    """Submits per second of each path, in one fresh database: the median of its blocks, the
    paths interleaved block by block (a path measured last on a fuller table, or in a quieter
    minute, would otherwise be compared with one measured first)."""
    block = max(1, runs // ROUNDS)
    with fresh_database(backend) as url, tidegate.App(url) as app:

        @app.task(name="bench.plain", queue="bench")
        def plain(n: int) -> None:
            return None

        @app.task(name="bench.unique", queue="bench", unique=tidegate.Unique(by_args=["n"]))
        def unique(n: int) -> None:
            return None

        plain.submit(n=-1)  # declarations and connections made before the clock starts
        unique.submit(n=-1)
        counter = itertools.count()
        connection = _connect(url)
        loop = asyncio.new_event_loop()
        loop.run_until_complete(plain.submit_async(n=-1))  # the async pool opened before the clock starts
        paths: dict[str, Callable[[], float]] = {
            "plain": lambda: _rate(lambda: plain.submit(n=next(counter)), block),
            "unique_new": lambda: _rate(lambda: unique.submit(n=next(counter)), block),
            "unique_duplicate": lambda: _rate(lambda: unique.submit(n=-1), block),  # held since the warm-up
            "transactional": lambda: _rate(lambda: _in_transaction(connection, plain, next(counter)), block),
            "plain_16_threads": lambda: _threaded_rate(pool, lambda: plain.submit(n=next(counter)), block),
            "async_16_tasks": lambda: loop.run_until_complete(_async_rate(plain, counter, block)),
        }
        rates: dict[str, list[float]] = {name: [] for name in paths}
        try:
            with ThreadPoolExecutor(THREADS) as pool:
                for _ in range(ROUNDS):
                    for name, rate in paths.items():
                        rates[name].append(rate())
        finally:
            connection.close()
            loop.run_until_complete(app.aclose())
            loop.close()
        return {name: median(values) for name, values in rates.items()}


def _connect(url: str) -> Any:
    """The caller's own connection, as an application opens it."""
    if url.startswith("sqlite"):
        # The durability of tidegate's own connections (docs/submitting.md): Python's default,
        # synchronous=FULL, would time a disk flush per commit that the plain submit does not pay.
        connection = sqlite3.connect(url[len("sqlite:///") :], timeout=30)
        connection.execute("PRAGMA synchronous = NORMAL")
        return connection
    return psycopg.connect(url)


def _in_transaction(connection: Any, task: tidegate.Task, index: int) -> None:
    task.options(connection=connection).submit(n=index)
    connection.commit()


async def _async_rate(task: tidegate.Task, counter: Iterator[int], runs: int) -> float:
    """`runs` async submits from 16 tasks of one loop."""
    todo = iter(range(runs))

    async def submitter() -> None:
        for _ in todo:
            await task.submit_async(n=next(counter))

    started = time.perf_counter()
    await asyncio.gather(*[submitter() for _ in range(THREADS)])
    return runs / (time.perf_counter() - started)


def _threaded_rate(pool: ThreadPoolExecutor, submit: Callable[[], object], runs: int) -> float:
    started = time.perf_counter()
    list(pool.map(lambda _: submit(), range(runs)))
    return runs / (time.perf_counter() - started)


def _rate(submit: Callable[[], object], runs: int) -> float:
    started = time.perf_counter()
    for _ in range(runs):
        submit()
    return runs / (time.perf_counter() - started)


def main() -> None:
    options = parse_options(__doc__, 2000)
    console = Console()
    load = os.getloadavg()
    samples = repeated(options.backends, options.repeat, lambda backend: measure(backend, options.runs), console)
    rows = []
    for backend, backend_samples in samples.items():
        figures = medians(backend_samples)
        for label, rate in figures.items():
            rows.append([backend, label, f"{rate:,.0f}", f"{rate / figures['plain']:.2f}"])
    for backend, backend_samples in samples.items():
        figures = medians(backend_samples)
        ratio = figures["async_16_tasks"] / figures["plain_16_threads"]
        rows.append([backend, "async_16_tasks / plain_16_threads", "", f"{ratio:.2f}"])
    notes = [
        measured_with("python benchmarks/submit_paths.py"),
        f"Load average before the run: {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} (shared machine: provisional).",
    ]
    written = write_markdown("submit_paths", "Submit paths", ["backend", "path", "submits/s", "x plain"], rows, notes)
    console.print(written.read_text())


if __name__ == "__main__":
    main()
