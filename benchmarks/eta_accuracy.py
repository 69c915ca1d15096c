"""How close `queue why`'s ETA comes to the wait that follows, from the first seconds of a backlog.

    python benchmarks/eta_accuracy.py [--repeat 3] [--postgres] [--sample 3] [--name eta_accuracy]

A steady workload: a queue of limit 3, two workers (threads of this process,
max_workers=4 each, so the queue's limit binds), runs sleeping 0.3-0.7 s
(uniform, seeded), a backlog of 300 queued before the workers start. Every
1.5 s for the first 45 s, `engine.operators.why.explain` is asked about --sample queued
runs at random positions (seeded); each answer's ETA is compared with the wait
that followed: the run's recorded start minus the time of the question, both
on the store's clock. Reported per backend, the median over --repeat fresh
databases of: the share of answers within +-30 % of the actual wait (an
answer without an ETA counts as a miss), the median signed error and the
median absolute error. Bounded: one repeat takes about a minute (the backlog
drains in about 55 s); a run that has not started 120 s after the last
question fails the benchmark.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from dataclasses import dataclass

from rich.console import Console
from rich.table import Table

from common import fresh_database, measured_with, median, write_markdown
from tidegate import App, Concurrency
from tidegate.engine.operators.why import explain

QUEUE = "eta"
LIMIT = 3
WORKERS = 2
MAX_WORKERS = 4
BACKLOG = 300
SHORTEST, LONGEST = 0.3, 0.7
ASK_EVERY = 1.5
ASK_FOR = 45.0
WITHIN = 0.30
START_BOUND = 120.0
console = Console()


@dataclass(frozen=True)
class Ask:
    run_id: str
    at: float  # the store's clock when the question was asked
    eta: float | None


def build(url: str) -> App:
    app = App(url)
    app.queue(QUEUE, concurrency=Concurrency(global_limit=LIMIT))

    @app.task(name="eta_sleep", queue=QUEUE)
    def eta_sleep(seconds: float) -> None:
        time.sleep(seconds)

    return app


def ask(app: App, rng: random.Random, sample: int) -> list[Ask]:
    """`sample` queued runs at random positions in the claim order, and the ETA `queue why` gives each."""
    queued = app.store.list_queued(QUEUE, limit=BACKLOG)
    asks = []
    for run in rng.sample(queued, min(sample, len(queued))):
        at = app.clock.wall()
        asks.append(Ask(run.id, at, explain(app.store, run.id).eta_seconds))
    return asks


def measure(backend: str, seed: int, sample: int) -> dict[str, float]:
    rng = random.Random(seed)
    with fresh_database(backend) as url:
        app = build(url)
        try:
            durations = [{"seconds": rng.uniform(SHORTEST, LONGEST)} for _ in range(BACKLOG)]
            app.tasks["eta_sleep"].submit_many(durations)
            workers = [app.worker(queues=[QUEUE], max_workers=MAX_WORKERS).start() for _ in range(WORKERS)]
            try:
                asks: list[Ask] = []
                began = time.monotonic()
                while time.monotonic() - began < ASK_FOR:
                    asks.extend(ask(app, rng, sample))
                    time.sleep(max(0.0, ASK_EVERY - (time.monotonic() - began) % ASK_EVERY))
                starts = wait_for_starts(app, {item.run_id for item in asks})
            finally:
                for worker in workers:
                    worker.stop(timeout=30, grace=0)
                for worker in workers:
                    worker.join(30)
        finally:
            app.close()
    errors = [error(item, starts[item.run_id]) for item in asks]
    known = [value for value in errors if value is not None]
    return {
        "within": sum(1 for value in known if abs(value) <= WITHIN) / len(errors),
        "median_error": statistics.median(known) if known else float("nan"),
        "median_abs_error": statistics.median(abs(value) for value in known) if known else float("nan"),
        "asks": float(len(errors)),
        "unknown": float(len(errors) - len(known)),
    }


def wait_for_starts(app: App, run_ids: set[str]) -> dict[str, float]:
    """Each run's recorded start (epoch seconds on the store's clock), waiting for the last of them."""
    deadline = time.monotonic() + START_BOUND
    while True:
        runs = {run_id: app.store.get_run(run_id) for run_id in run_ids}
        started = {run_id: run.started_at.timestamp() for run_id, run in runs.items() if run and run.started_at}
        if len(started) == len(run_ids):
            return started
        if time.monotonic() > deadline:
            raise SystemExit(f"{len(run_ids) - len(started)} sampled runs did not start within {START_BOUND:.0f} s")
        time.sleep(0.2)


def error(item: Ask, started: float) -> float | None:
    """(ETA - actual wait) / actual wait; None without an ETA."""
    if item.eta is None:
        return None
    actual = max(started - item.at, 0.01)  # a run that started as it was asked: any ETA is far off in ratio
    return (item.eta - actual) / actual


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--postgres", action="store_true", help="PostgreSQL too (TIDEGATE_BENCH_PG), after SQLite")
    parser.add_argument("--sample", type=int, default=3, help="runs asked about at each question")
    parser.add_argument("--name", default="eta_accuracy", help="the results file, under benchmarks/results/")
    options = parser.parse_args()
    backends = ["sqlite", "postgres"] if options.postgres else ["sqlite"]
    table = Table(title="queue why: ETA against the actual wait")
    header = ["backend", "within +-30 %", "median error", "median abs. error", "asks (no ETA)"]
    for column in header:
        table.add_column(column)
    rows = []
    for backend in backends:
        samples = []
        for attempt in range(options.repeat):
            figures = measure(backend, seed=attempt, sample=options.sample)
            console.print(f"[dim]{backend} run {attempt + 1}: { {k: round(v, 3) for k, v in figures.items()} }[/]")
            samples.append(figures)
        result = {key: median([sample[key] for sample in samples]) for key in samples[0]}
        row = [
            backend,
            f"{result['within']:.0%}",
            f"{result['median_error']:+.0%}",
            f"{result['median_abs_error']:.0%}",
            f"{result['asks']:.0f} ({result['unknown']:.0f})",
        ]
        rows.append(row)
        table.add_row(*row)
    console.print(table)
    notes = [
        measured_with(
            f"python benchmarks/eta_accuracy.py {'--postgres ' if options.postgres else ''}--repeat {options.repeat}"
        ),
        "",
        f"Queue limit {LIMIT}, {WORKERS} worker threads (max_workers={MAX_WORKERS}), runs of "
        f"{SHORTEST}-{LONGEST} s, a backlog of {BACKLOG}; `queue why` asked about {options.sample} random "
        f"queued runs every {ASK_EVERY} s for the first {ASK_FOR:.0f} s. Error = (ETA - actual wait) / actual "
        "wait, the wait ending at the run's recorded start; an answer without an ETA counts as a miss. "
        f"Medians over {options.repeat} fresh databases (seeds 0..{options.repeat - 1}).",
    ]
    path = write_markdown(options.name, "ETA accuracy (queue why)", header, rows, notes)
    console.print(f"written to {path}")


if __name__ == "__main__":
    main()
