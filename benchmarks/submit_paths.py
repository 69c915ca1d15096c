"""Submit paths (issue 26), as ratios to the plain single submit measured in the same run.

Measured: the plain single submit (one after another), a unique submit with a new key each time,
a unique submit meeting its key's holder (a duplicate), a submit in the caller's transaction (its
own connection, one commit per submit), the plain submit from 16 threads, and the async submit
from one event loop with 16 concurrent tasks. Aims: unique and transactional >= 0.8 of plain;
async from 16 tasks >= 1.0 of sync from 16 threads.

    .venv/bin/python benchmarks/submit_paths.py --runs 300 --repeat 3
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg
from rich.console import Console

import tidegate
from common import fresh_database, measured_with, medians, parse_options, repeated, write_markdown

THREADS = 16


def measure(backend: str, runs: int) -> dict[str, float]:
    """Submits per second of each path, each in a fresh database."""
    with fresh_database(backend) as url, tidegate.App(url) as app:

        @app.task(name="bench.plain", queue="bench")
        def plain(n: int) -> None:
            return None

        @app.task(name="bench.unique", queue="bench", unique=tidegate.Unique(by_args=["n"]))
        def unique(n: int) -> None:
            return None

        plain.submit(n=-1)  # declarations and connections made before the clock starts
        unique.submit(n=-1)
        figures = {
            "plain": _rate(lambda i: plain.submit(n=i), runs),
            "unique_new": _rate(lambda i: unique.submit(n=i), runs),
            "unique_duplicate": _rate(lambda i: unique.submit(n=0), runs),
        }
        connection = _connect(url)
        try:
            figures["transactional"] = _rate(lambda i: _in_transaction(connection, plain, i), runs)
        finally:
            connection.close()
        with ThreadPoolExecutor(THREADS) as pool:
            started = time.perf_counter()
            list(pool.map(lambda i: plain.submit(n=i), range(runs)))
            figures["plain_16_threads"] = runs / (time.perf_counter() - started)
        figures["async_16_tasks"] = asyncio.run(_async_rate(app, plain, runs))
        return figures


def _connect(url: str) -> Any:
    """The caller's own connection, as an application opens it."""
    if url.startswith("sqlite"):
        return sqlite3.connect(url[len("sqlite:///") :], timeout=30)
    return psycopg.connect(url)


def _in_transaction(connection: Any, task: tidegate.Task, index: int) -> None:
    task.options(connection=connection).submit(n=index)
    connection.commit()


async def _async_rate(app: tidegate.App, task: tidegate.Task, runs: int) -> float:
    """`runs` async submits from 16 tasks of one loop (the pool opened before the clock starts)."""
    await task.submit_async(n=-1)
    counter = iter(range(runs))

    async def submitter() -> None:
        for index in counter:
            await task.submit_async(n=index)

    started = time.perf_counter()
    await asyncio.gather(*[submitter() for _ in range(THREADS)])
    rate = runs / (time.perf_counter() - started)
    await app.aclose()
    return rate


def _rate(submit: Callable[[int], object], runs: int) -> float:
    started = time.perf_counter()
    for index in range(runs):
        submit(index)
    return runs / (time.perf_counter() - started)


def main() -> None:
    options = parse_options(__doc__, 300)
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
