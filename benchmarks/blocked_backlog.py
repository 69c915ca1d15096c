"""Claiming past a blocked backlog: does a run that may start wait on runs that may not?

    python benchmarks/blocked_backlog.py [--sizes 0,10000,100000] [--repeat 3] [--backends sqlite,postgres]

The queue `blocked` is partitioned by the arg `p` with global_limit=1 per
partition. Partitions p0..p9 each hold one run claimed by a stand-in worker
with a one-hour lease (the long-running holder), so they are saturated, and
--sizes runs sit queued behind them (spread evenly over p0..p9, inserted with
`submit_many` in chunks). A run of a partition of its own is eligible at
once. For each backlog size, in a fresh database:

- probe latency: with one worker process (max_workers=64) serving the queue,
  submit one eligible run (a new partition each time) and take the time from
  its RunQueued to its RunDequeued event, as the database recorded them;
  median over --probes probes, one at a time;
- claim transaction: `store.cycle` timed in this process (no worker running),
  claiming with claim_limit 1 and 64 when nothing is eligible, and with
  claim_limit 1 when one eligible run is waiting (median of many calls);
- the blocked worker: how many store cycles per second the worker process
  makes, and the % of a core it uses, over a few seconds while the backlog
  waits and nothing is eligible.

On PostgreSQL each size is measured twice in the same database: as inserted
(no statistics on the new rows yet, autovacuum kept off the table so that
this holds throughout) and after `ANALYZE tidegate_runs`.

Each figure is also reported as a ratio to the empty case (no backlog, same
saturated holders), measured in the same run; the target for the probe
latency is <= 2x at 100,000. Medians over --repeat.
"""

from __future__ import annotations

import argparse
import statistics
import time

import psycopg
from rich.console import Console
from rich.table import Table

from common import fresh_database, measured_with, median, write_markdown
from limits_apps import build, idle_cpu_percent, query, start_worker, stop_worker, wait_ready, worker_cycles
from tidegate import App
from tidegate.domain.model import CycleRequest, Outcome, OutcomeKind

PARTITIONS = 10
CHUNK = 5000
MAX_WORKERS = 64
HOLDER = "bench:holder"
DIRECT = "bench:direct"
TIMED_CYCLES = 30  # at most, and at most TIME_BUDGET seconds of them (at least MIN_CALLS)
TIMED_CLAIMS = 10
TIME_BUDGET = 1.0
MIN_CALLS = 3
CPU_SECONDS = 2.0
console = Console()


def fill(url: str, size: int, chunk: int) -> tuple[App, float]:
    """Saturate p0..p9 with one held run each, then queue `size` runs behind them; (app, insert runs/s)."""
    app = build("backlog", url)
    task = app.tasks["backlog_noop"]
    task.submit_many([{"p": f"p{index}"} for index in range(PARTITIONS)])
    held = app.store.cycle(CycleRequest(HOLDER, ["blocked"], [], [], PARTITIONS, 3600.0))
    if len(held.claimed) != PARTITIONS:
        raise SystemExit(f"expected {PARTITIONS} holders, claimed {len(held.claimed)}")
    started = time.perf_counter()
    for offset in range(0, size, chunk):
        task.submit_many([{"p": f"p{index % PARTITIONS}"} for index in range(offset, min(size, offset + chunk))])
    rate = size / (time.perf_counter() - started) if size else 0.0
    return app, rate


def timed_cycles(app: App, claim_limit: int, calls: int) -> float:
    store = app.store
    store.cycle(CycleRequest(DIRECT, ["blocked"], [], [], claim_limit, 30.0))  # warm up: records block reasons once
    times: list[float] = []
    while len(times) < calls and (len(times) < MIN_CALLS or sum(times) < TIME_BUDGET):
        started = time.perf_counter()
        result = store.cycle(CycleRequest(DIRECT, ["blocked"], [], [], claim_limit, 30.0))
        times.append(time.perf_counter() - started)
        if result.claimed:
            raise SystemExit("a blocked run was claimed")
    return statistics.median(times)


def timed_eligible_claims(app: App, calls: int) -> float:
    """A cycle that finds and claims the one eligible run among the blocked ones."""
    store = app.store
    task = app.tasks["backlog_noop"]
    times: list[float] = []
    while len(times) < calls and (len(times) < MIN_CALLS or sum(times) < TIME_BUDGET):
        task.submit(p=f"direct{len(times)}")
        started = time.perf_counter()
        result = store.cycle(CycleRequest(DIRECT, ["blocked"], [], [], 1, 30.0))
        times.append(time.perf_counter() - started)
        if len(result.claimed) != 1:
            raise SystemExit(f"expected to claim the eligible run, claimed {len(result.claimed)}")
        run = result.claimed[0]
        store.cycle(
            CycleRequest(DIRECT, ["blocked"], [], [Outcome(run.id, run.attempt, OutcomeKind.COMPLETED)], 0, 30.0)
        )
    return statistics.median(times)


def probe_latencies(url: str, app: App, probes: int, phase: str) -> list[float]:
    task = app.tasks["backlog_noop"]
    latencies = []
    for index in range(probes):
        run_id = task.submit(p=f"probe-{phase}-{index}").id
        deadline = time.monotonic() + 60
        while True:
            rows = query(
                url,
                "SELECT type, at FROM tidegate_events WHERE run_id = ? AND type IN ('RunQueued', 'RunDequeued')",
                "SELECT type, extract(epoch FROM at)::float8 FROM tidegate_events "
                "WHERE run_id = %s AND type IN ('RunQueued', 'RunDequeued')",
                (run_id,),
            )
            times = dict(rows)
            if "RunDequeued" in times:
                latencies.append(times["RunDequeued"] - times["RunQueued"])
                break
            if time.monotonic() > deadline:
                raise SystemExit(f"probe {run_id} was not claimed within 60 s")
            time.sleep(0.02)
        time.sleep(0.1)  # let it complete and the worker settle before the next probe
    return latencies


def analyze(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute("ANALYZE tidegate_runs")


def measure_phase(url: str, app: App, probes: int, phase: str) -> dict[str, float]:
    figures = {
        "cycle_1": timed_cycles(app, 1, TIMED_CYCLES),
        "cycle_64": timed_cycles(app, MAX_WORKERS, TIMED_CYCLES),
        "claim_1": timed_eligible_claims(app, TIMED_CLAIMS),
    }
    worker = start_worker(url, "backlog", ["blocked"], MAX_WORKERS)
    try:
        wait_ready(worker)
        time.sleep(0.5)  # its first cycles record the block reasons
        before = worker_cycles(worker)
        started = time.monotonic()
        figures["cpu"] = idle_cpu_percent([worker.pid], CPU_SECONDS)[0]
        figures["cycles"] = (worker_cycles(worker) - before) / (time.monotonic() - started)
        figures["probe"] = statistics.median(probe_latencies(url, app, probes, phase))
    finally:
        stop_worker(worker)
    return figures


def measure_size(backend: str, size: int, probes: int, chunk: int) -> dict[str, dict[str, float]]:
    """Figures per phase: as inserted (PostgreSQL: no statistics yet), and on PostgreSQL after ANALYZE."""
    with fresh_database(backend) as url:
        app = build("backlog", url)
        if backend == "postgres":
            app.store.migrate()
            with psycopg.connect(url, autocommit=True) as connection:
                # So that autovacuum cannot analyze the table halfway through the first phase.
                connection.execute("ALTER TABLE tidegate_runs SET (autovacuum_enabled = off)")
        app.close()
        app, insert_rate = fill(url, size, chunk)
        try:
            phases = {"inserted": measure_phase(url, app, probes, "inserted")}
            if backend == "postgres":
                analyze(url)
                phases["analyzed"] = measure_phase(url, app, probes, "analyzed")
        finally:
            app.close()
    for figures in phases.values():
        figures["insert"] = insert_rate
    return phases


PHASE_LABELS = {"inserted": "as inserted", "analyzed": "after ANALYZE"}


Figures = dict[str, float]


def measure_backend(backend: str, sizes: list[int], options: argparse.Namespace) -> dict[tuple[str, int], Figures]:
    """Every backlog size measured `--repeat` times on one backend; the median of each figure per (phase, size)."""
    samples: dict[int, list[dict[str, Figures]]] = {size: [] for size in sizes}
    for attempt in range(options.repeat):
        for size in sizes:
            console.print(f"[dim]{backend}: run {attempt + 1} of {options.repeat}, backlog {size:,}[/]")
            samples[size].append(measure_size(backend, size, options.probes, options.chunk))
            for phase, figures in samples[size][-1].items():
                console.print(f"[dim]  {phase}: { {key: round(value, 5) for key, value in figures.items()} }[/]")
    results: dict[tuple[str, int], Figures] = {}
    for phase in samples[sizes[0]][0]:
        for size in sizes:
            runs = [sample[phase] for sample in samples[size]]
            results[(phase, size)] = {key: median([run[key] for run in runs]) for key in runs[0]}
    return results


HEADER = [
    "backend",
    "statistics",
    "blocked backlog",
    "probe: submit to claim",
    "vs empty",
    "claim txn, limit 1, none eligible",
    "claim txn, limit 64, none eligible",
    "claim txn, limit 1, one eligible",
    "vs empty",
    "blocked worker: cycles/s",
    "blocked worker: CPU",
    "backlog insert",
]


def table_rows(results: dict[tuple[str, str, int], Figures]) -> list[list[str]]:
    """One row per (backend, phase, size), with its ratios to the empty backlog of the same backend and phase."""
    rows = []
    for (backend, phase, size), f in results.items():
        empty = results[(backend, phase, 0)]
        rows.append(
            [
                backend,
                "-" if backend == "sqlite" else PHASE_LABELS[phase],
                f"{size:,}",
                f"{f['probe'] * 1000:.1f} ms",
                f"{f['probe'] / empty['probe']:.2f}x",
                f"{f['cycle_1'] * 1000:.2f} ms",
                f"{f['cycle_64'] * 1000:.2f} ms",
                f"{f['claim_1'] * 1000:.2f} ms",
                f"{f['claim_1'] / empty['claim_1']:.2f}x",
                f"{f['cycles']:,.0f}",
                f"{f['cpu']:.1f}%",
                f"{f['insert']:,.0f} runs/s" if size else "-",
            ]
        )
    return rows


def notes(options: argparse.Namespace) -> list[str]:
    """What each column measures, written under the results table."""
    return [
        measured_with("python benchmarks/blocked_backlog.py"),
        f"Queue partitioned by `p` with global_limit=1; p0..p{PARTITIONS - 1} each held by a run with a one-hour "
        f"lease; the backlog is queued evenly behind them (`submit_many`, {options.chunk:,} runs a call), so none "
        "of it may start.",
        f"Probe: one worker process (max_workers={MAX_WORKERS}); one run of a free partition is submitted at a "
        "time, and the time from its RunQueued to its RunDequeued event (database timestamps) is the median over "
        "the probes. The target is <= 2x the empty case at 100,000.",
        "Claim txn: one `store.cycle` in the benchmark process with no worker running, median of up to "
        f"{TIMED_CYCLES} calls (none eligible) or {TIMED_CLAIMS} claims (one eligible run submitted before each), "
        f"fewer (at least {MIN_CALLS}) when they take over {TIME_BUDGET:.0f} s.",
        f"Blocked worker: over {CPU_SECONDS:.0f} s with the backlog queued and nothing eligible, how many store "
        "cycles the worker process made per second and the % of one core it used (the database server's own "
        "work is not in that figure).",
        "PostgreSQL statistics: 'as inserted' measures right after the burst of inserts, before anything analyzed "
        "the table (autovacuum is turned off on the benchmark schema's runs table so that it cannot do so "
        "halfway); 'after ANALYZE' measures the same database again after `ANALYZE tidegate_runs`. SQLite keeps "
        "no statistics unless asked, and tidegate does not ask.",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="0,10000,100000")
    parser.add_argument("--probes", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--chunk", type=int, default=CHUNK, help="runs per submit_many when filling the backlog")
    options = parser.parse_args()
    sizes = [int(size) for size in options.sizes.split(",")]
    if sizes[0] != 0:
        sizes.insert(0, 0)  # the empty case is the baseline
    results = {
        (backend, phase, size): figures
        for backend in options.backends.split(",")
        for (phase, size), figures in measure_backend(backend, sizes, options).items()
    }
    rows = table_rows(results)
    title = (
        f"Claiming past a blocked backlog: {PARTITIONS} saturated partitions, "
        f"median of {options.repeat} (probe: median of {options.probes})"
    )
    table = Table(title=title)
    for column in HEADER:
        table.add_column(column, justify="left" if column in ("backend", "statistics") else "right")
    for row in rows:
        table.add_row(*row)
    console.print(table)
    path = write_markdown("blocked_backlog", title, HEADER, rows, notes(options))
    console.print(f"written to {path}")


if __name__ == "__main__":
    main()
