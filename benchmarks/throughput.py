"""Throughput: submit N no-op runs, then drain them with worker processes.

    python benchmarks/throughput.py [--runs 10000] [--repeat 3] [--backends sqlite,postgres]

Reports, per backend, the median over --repeat fresh databases of:
- submit runs/s, one run per call (1,000 calls) and batched (`submit_many`);
- drain runs/s with one worker process and with two, from the first claim to
  the last completion as the database recorded them (process start-up is
  not counted);
- the baseline, measured in the same run: one claim and one completion per
  transaction (what a worker without batching does), and the ratio to it.
"""

from __future__ import annotations

import os
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import psycopg
from rich.console import Console

import tidegate
from common import fresh_database, measured_with, medians, parse_options, print_table, repeated, write_markdown
from tidegate.domain.model import CycleRequest, Outcome, OutcomeKind

HERE = Path(__file__).parent
MAX_WORKERS = 64
SINGLE_SUBMITS = 1000
BASELINE_RUNS = 2000
console = Console()


def make_app(url: str) -> tidegate.App:
    os.environ["TIDEGATE_DATABASE"] = url
    sys.path.insert(0, str(HERE))
    import bench_app

    app = tidegate.App(url)
    for queue in ("single", "baseline"):  # side queues for the single-submit and baseline figures
        app.queue(queue)
    app.task(queue="bench", name=bench_app.noop.name)(bench_app.noop.fn)
    return app


def submit_rates(app: tidegate.App, runs: int) -> tuple[float, float]:
    noop = next(iter(app.tasks.values()))
    single = noop.options(queue="single")
    started = time.perf_counter()
    for _ in range(SINGLE_SUBMITS):
        single.submit()
    single_rate = SINGLE_SUBMITS / (time.perf_counter() - started)
    started = time.perf_counter()
    for offset in range(0, runs, 1000):
        noop.submit_many([{}] * min(1000, runs - offset))
    return single_rate, runs / (time.perf_counter() - started)


def drain_rate(url: str, processes: int, runs: int) -> float:
    env = {**os.environ, "TIDEGATE_DATABASE": url}
    workers = [
        subprocess.Popen([sys.executable, str(HERE / "run_worker.py"), str(MAX_WORKERS)], env=env)
        for _ in range(processes)
    ]
    for worker in workers:
        if worker.wait(timeout=600) != 0:
            raise SystemExit(f"a worker process exited with {worker.returncode}")
    first, last, completed = claim_window(url)
    if completed != runs:
        raise SystemExit(f"expected {runs} completed runs, found {completed}")
    return runs / (last - first)


def claim_window(url: str) -> tuple[float, float, int]:
    """(first claim, last completion, completions) in the bench queue, in epoch seconds."""
    where = "type IN ('RunDequeued', 'RunCompleted') AND run_id IN (SELECT id FROM tidegate_runs WHERE queue = 'bench')"
    count = "SELECT count(*) FROM tidegate_runs WHERE queue = 'bench' AND status = 'completed'"
    if url.startswith("sqlite"):
        with sqlite3.connect(url[len("sqlite:///") :]) as connection:
            first, last = connection.execute(f"SELECT min(at), max(at) FROM tidegate_events WHERE {where}").fetchone()
            completed = connection.execute(count).fetchone()[0]
        return first, last, completed
    with psycopg.connect(url) as connection:
        [(first, last)] = connection.execute(
            "SELECT extract(epoch FROM min(at))::float8, extract(epoch FROM max(at))::float8"
            f" FROM tidegate_events WHERE {where}"
        ).fetchall()
        [(completed,)] = connection.execute(count).fetchall()
    return first, last, completed


def baseline_rate(app: tidegate.App) -> float:
    """One claim and one completion per transaction, through the same store."""
    noop = next(iter(app.tasks.values()))
    noop.options(queue="baseline").submit_many([{}] * BASELINE_RUNS)
    store = app.store
    worker_id = f"{socket.gethostname()}:baseline"
    outcomes: list[Outcome] = []
    done = 0
    started = time.perf_counter()
    while done < BASELINE_RUNS:
        result = store.cycle(CycleRequest(worker_id, ["baseline"], [], outcomes, 1, 30.0))
        done += len(outcomes)
        outcomes = [Outcome(run.id, run.attempt, OutcomeKind.COMPLETED) for run in result.claimed]
        if not result.claimed and not outcomes and done < BASELINE_RUNS:
            raise SystemExit("baseline ran dry")
    return BASELINE_RUNS / (time.perf_counter() - started)


def measure(backend: str, runs: int) -> dict[str, float]:
    figures: dict[str, float] = {}
    with fresh_database(backend) as url:
        app = make_app(url)
        figures["submit_single"], figures["submit_batched"] = submit_rates(app, runs)
        figures["baseline"] = baseline_rate(app)
        app.close()
        figures["drain_1"] = drain_rate(url, 1, runs)
    with fresh_database(backend) as url:
        app = make_app(url)
        submit_rates(app, runs)
        app.close()
        figures["drain_2"] = drain_rate(url, 2, runs)
    return figures


def main() -> None:
    options = parse_options(__doc__, runs=10_000)
    samples = repeated(options.backends, options.repeat, lambda backend: measure(backend, options.runs), console)
    results = {backend: medians(found) for backend, found in samples.items()}
    header = [
        "backend",
        "submit/s (1 per call)",
        "submit/s (batched)",
        "drain/s, 1 process",
        "drain/s, 2 processes",
        "baseline: 1 run per txn",
        "drain 1p / baseline",
    ]
    rows = [
        [
            backend,
            f"{figures['submit_single']:,.0f}",
            f"{figures['submit_batched']:,.0f}",
            f"{figures['drain_1']:,.0f}",
            f"{figures['drain_2']:,.0f}",
            f"{figures['baseline']:,.0f}",
            f"{figures['drain_1'] / figures['baseline']:.1f}x",
        ]
        for backend, figures in results.items()
    ]
    print_table(console, f"Throughput, {options.runs:,} no-op runs, median of {options.repeat}", header, rows)
    path = write_markdown(
        "throughput",
        f"Throughput: {options.runs:,} no-op runs, median of {options.repeat}",
        header,
        rows,
        [
            measured_with("python benchmarks/throughput.py"),
            f"Worker processes run `max_workers={MAX_WORKERS}`; drain time runs from the first claim to the last "
            "completion as recorded in the database.",
            "The baseline is one claim and one completion per transaction through the same store, measured in the "
            "same run.",
        ],
    )
    console.print(f"written to {path}")


if __name__ == "__main__":
    main()
