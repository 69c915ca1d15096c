"""Soak: a sustained load with retention on, sampled every minute, to see whether anything drifts.

    python benchmarks/soak.py [--minutes 30] [--retention 5] [--window 5] [--rate 50]
                              [--workers 2] [--backend postgres|sqlite] [--shared]

One command: a fresh database (on PostgreSQL, in a private cluster the soak starts with
`initdb` and removes, whose defaults keep autovacuum on: without it no deleted row's space
is ever reused and no size can stay flat; `--shared` uses $TIDEGATE_BENCH_PG's server
instead, and the results say whether its autovacuum is on), --workers worker processes
(`limits_worker.py soak`, serving both queues, `TIDEGATE_RETENTION` = --retention minutes, so
their sweeper prunes), and this process submitting for --minutes:

- `soak`: --rate no-op runs per second, in a batch every 100 ms (`submit_many`), on a queue
  with no limit: the sustained stream whose drain rate is counted per minute;
- `handoff`: a burst of HANDOFF_BURST zero-work runs every HANDOFF_EVERY seconds on a queue
  limited to one slot: each gap from a run's RunCompleted to the next run's RunDequeued (the
  next was already queued) is a hand-off, as in `handoff.py`.

Every minute it reads, from the events written since the last sample (they are younger than
the retention, so none has been pruned yet), the runs completed and the hand-off gaps; and
the bytes the runs and events tables and their indexes occupy as they are (no VACUUM: what a
live database holds, with autovacuum's work and the prune's free space in it).

It reports the first --window minutes against the last (drain rate per minute and hand-off
p99, each "stable" if within 20 %), and whether sizes are flat after the first retention
cycle: every sample from the end of the first cycle (retention plus one minute, when the
prune has caught up with the first runs) on stays within 20 % of the size there. Results:
`benchmarks/results/soak.md`. It stops by itself after --minutes, and its workers with it.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the chaos suite's private cluster

import common
from chaos.cluster import private_cluster
from common import fresh_database, measured_with, write_markdown
from limits_apps import build, percentile, query, start_worker, stop_worker, wait_ready

HANDOFF_BURST = 20
HANDOFF_EVERY = 10.0
SUBMIT_EVERY = 0.1
SAMPLE_EVERY = 60.0
MAX_WORKERS = 8
TOLERANCE = 0.2
console = Console()

PG_SIZES = """
SELECT c.relname, pg_table_size(c.oid), pg_indexes_size(c.oid) FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = current_schema() AND c.relkind = 'r' AND c.relname IN ('tidegate_runs', 'tidegate_events')
"""
SQLITE_SIZES = """
SELECT s.name, m.tbl_name, m.type, sum(s.pgsize) FROM dbstat s JOIN sqlite_master m ON m.name = s.name
WHERE m.tbl_name IN ('tidegate_runs', 'tidegate_events') GROUP BY s.name
"""
NEW_EVENTS_SQLITE = """
SELECT e.id, e.type, e.at, r.queue, r.submitted_at FROM tidegate_events e JOIN tidegate_runs r ON r.id = e.run_id
WHERE e.id > ? AND e.type IN ('RunCompleted', 'RunDequeued') ORDER BY e.id
"""
NEW_EVENTS_PG = """
SELECT e.id, e.type, extract(epoch FROM e.at)::float8, r.queue, extract(epoch FROM r.submitted_at)::float8
FROM tidegate_events e JOIN tidegate_runs r ON r.id = e.run_id
WHERE e.id > %s AND e.type IN ('RunCompleted', 'RunDequeued') ORDER BY e.id
"""
QUEUED = "SELECT count(*) FROM tidegate_runs WHERE status = 'queued'"


@dataclass
class Sample:
    minute: int
    submitted: int
    completed: int
    queued: int
    runs_bytes: int
    events_bytes: int
    handoffs: list[float] = field(default_factory=list)

    @property
    def stored(self) -> int:
        return self.runs_bytes + self.events_bytes


class Reader:
    """Reads what happened since its last call: completions of `soak`, hand-off gaps of `handoff`."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.cursor = 0
        self.last_completed: float | None = None  # the handoff queue's latest completion not followed yet

    def new(self) -> tuple[int, list[float]]:
        rows = query(self.url, NEW_EVENTS_SQLITE, NEW_EVENTS_PG, (self.cursor,))
        if rows:
            self.cursor = rows[-1][0]
        completed = sum(1 for _, kind, _, queue, _ in rows if queue == "soak" and kind == "RunCompleted")
        gaps = []
        for _, kind, at, queue, submitted_at in rows:
            if queue != "handoff":
                continue
            if kind == "RunCompleted":
                self.last_completed = at
            elif self.last_completed is not None and submitted_at <= self.last_completed:
                gaps.append(1000 * (at - self.last_completed))  # the slot went to a run that was waiting for it
            if kind == "RunDequeued":
                self.last_completed = None
        return completed, gaps

    def sizes(self) -> tuple[int, int]:
        """Bytes of (runs table + its indexes, events table + its indexes)."""
        if self.url.startswith("sqlite"):
            totals: dict[str, int] = {}
            for _, table, _, size in query(self.url, SQLITE_SIZES, ""):
                totals[table] = totals.get(table, 0) + size
        else:
            totals = {name: heap + indexes for name, heap, indexes in query(self.url, "", PG_SIZES)}
        return totals.get("tidegate_runs", 0), totals.get("tidegate_events", 0)

    def queued(self) -> int:
        return int(query(self.url, QUEUED, QUEUED)[0][0])


def soak(url: str, options: argparse.Namespace) -> list[Sample]:
    """Run the load for --minutes; one Sample a minute."""
    os.environ["TIDEGATE_RETENTION"] = f"{options.retention * 60:.0f}s"
    app = build("soak", url)
    app.store.check_schema()
    stream, burst = app.tasks["soak_noop"], app.tasks["handoff_noop"]
    workers: list[subprocess.Popen[bytes]] = []
    reader = Reader(url)
    samples: list[Sample] = []
    try:
        for _ in range(options.workers):
            workers.append(start_worker(url, "soak", ["soak", "handoff"], MAX_WORKERS))
            wait_ready(workers[-1])
        started = time.monotonic()
        submitted = submitted_at_sample = 0
        next_burst = started
        next_sample = started + SAMPLE_EVERY
        while len(samples) < options.minutes:  # the last sample ends the soak
            now = time.monotonic()
            due = int((now - started) * options.rate) - submitted
            if due > 0:
                due = min(due, 1000)  # after a stall, catch up a batch at a time
                stream.submit_many([{}] * due)
                submitted += due
            if now >= next_burst:
                burst.submit_many([{}] * HANDOFF_BURST)
                next_burst += HANDOFF_EVERY
            if now >= next_sample:
                completed, gaps = reader.new()
                runs_bytes, events_bytes = reader.sizes()
                samples.append(
                    Sample(
                        len(samples) + 1,
                        submitted - submitted_at_sample,
                        completed,
                        reader.queued(),
                        runs_bytes,
                        events_bytes,
                        gaps,
                    )
                )
                submitted_at_sample = submitted
                console.print(f"[dim]{row(samples[-1])}[/]")
                next_sample += SAMPLE_EVERY
            time.sleep(max(0.0, SUBMIT_EVERY - (time.monotonic() - now)))
    finally:
        for worker in workers:
            stop_worker(worker)
        app.close()
    return samples


def row(sample: Sample) -> list[str]:
    p99 = f"{percentile(sample.handoffs, 0.99):.1f}" if sample.handoffs else "-"
    return [
        str(sample.minute),
        f"{sample.submitted:,}",
        f"{sample.completed:,}",
        f"{sample.queued:,}",
        f"{sample.runs_bytes / 1e6:.1f}",
        f"{sample.events_bytes / 1e6:.1f}",
        p99,
    ]


def verdicts(samples: list[Sample], retention: float, window: int) -> list[str]:
    """The summary lines: first vs last window, and flatness after the first retention cycle."""
    first, last = samples[:window], samples[-window:]
    lines = []
    drain_first = statistics.mean(s.completed for s in first)
    drain_last = statistics.mean(s.completed for s in last)
    lines.append(judged("drain rate (runs/min)", drain_first, drain_last))
    gaps_first = [gap for s in first for gap in s.handoffs]
    gaps_last = [gap for s in last for gap in s.handoffs]
    if gaps_first and gaps_last:
        lines.append(judged("hand-off p99 (ms)", percentile(gaps_first, 0.99), percentile(gaps_last, 0.99)))
    cycle_end = int(retention) + 1  # the first prune has caught up by the minute after the retention
    after = [s for s in samples if s.minute >= cycle_end]
    if len(after) < 2:
        lines.append(f"sizes: the soak ended before its first retention cycle did (minute {cycle_end}): not judged")
        return lines
    for label, size_of in (("runs + indexes", "runs_bytes"), ("events + indexes", "events_bytes")):
        reference = getattr(after[0], size_of)
        worst = max(abs(getattr(s, size_of) / reference - 1) for s in after)
        flat = "flat" if worst <= TOLERANCE else "NOT flat"
        lines.append(
            f"{label}: {reference / 1e6:.1f} MB at minute {cycle_end}, {getattr(after[-1], size_of) / 1e6:.1f} MB"
            f" at the end; largest change after the first retention cycle {worst:.0%}: {flat} (within 20 %)"
        )
    return lines


def judged(label: str, first: float, last: float) -> str:
    ratio = last / first if first else float("nan")
    stable = "stable" if abs(ratio - 1) <= TOLERANCE else "NOT stable"
    return f"{label}: first window {first:,.1f}, last {last:,.1f}, last/first {ratio:.2f}: {stable} (within 20 %)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=int, default=30)
    parser.add_argument("--retention", type=float, default=5.0, help="minutes (at least 1)")
    parser.add_argument("--window", type=int, default=5, help="minutes compared, first vs last")
    parser.add_argument("--rate", type=float, default=50.0, help="runs submitted per second on `soak`")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--backend", choices=["postgres", "sqlite"], default="postgres")
    parser.add_argument(
        "--shared",
        action="store_true",
        help="use $TIDEGATE_BENCH_PG's server instead of a private cluster started for the soak (initdb, "
        "PostgreSQL's defaults: autovacuum on, which sizes flat over time depend on)",
    )
    options = parser.parse_args()
    if options.retention < 1 or options.minutes < options.window:
        parser.error("--retention must be at least 1 minute, and --minutes at least --window")
    # A stop by SIGTERM still stops the workers and drops the database (the `finally` blocks run).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    load = os.getloadavg()
    with ExitStack() as stack:
        if options.backend == "postgres" and not options.shared:
            common.PG_SERVER = stack.enter_context(private_cluster()).url
        url = stack.enter_context(fresh_database(options.backend))
        autovacuum = "-" if options.backend == "sqlite" else query(url, "", "SHOW autovacuum")[0][0]
        samples = soak(url, options)
    load_after = os.getloadavg()
    summary = verdicts(samples, options.retention, options.window)
    for line in summary:
        console.print(line)
    command = (
        f"python benchmarks/soak.py --minutes {options.minutes} --retention {options.retention:g} "
        f"--window {options.window} --rate {options.rate:g} --workers {options.workers} --backend {options.backend}"
        + (" --shared" if options.shared else "")
    )
    server = (
        "SQLite"
        if options.backend == "sqlite"
        else f"{'the shared server' if options.shared else 'a private cluster (fsync off)'}, autovacuum {autovacuum}"
    )
    header = ["minute", "submitted", "completed (soak)", "queued", "runs MB", "events MB", "hand-off p99 ms"]
    notes = [
        measured_with(command),
        f"{options.backend}; {options.workers} worker processes (`max_workers={MAX_WORKERS}`); retention "
        f"{options.retention:g} min; {server}; {options.rate:g} no-op runs/s on a queue with no limit, plus "
        f"{HANDOFF_BURST} runs every {HANDOFF_EVERY:.0f} s on a queue of one slot (the hand-offs). Sizes: tables "
        "with their indexes, as they are (no VACUUM). Load average (1 min) "
        f"{load[0]:.1f} at the start, {load_after[0]:.1f} at the end.",
        "",
        *(f"- {line}" for line in summary),
    ]
    path = write_markdown("soak", f"Soak, {options.minutes} minutes", header, [row(s) for s in samples], notes)
    console.print(f"written to {path}")


if __name__ == "__main__":
    main()
