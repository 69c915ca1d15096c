"""Hand-off under limit 1: how long a freed slot stays empty, and what an idle worker costs.

    python benchmarks/handoff.py [--runs 300] [--repeat 3] [--backends sqlite,postgres]
    python benchmarks/handoff.py --counts 150     # PostgreSQL store calls per hand-off, traced
                                                  # (1 and 2 workers on one queue; ping-pong)

Two worker processes (max_workers=8 each), zero-work runs, one slot. The gap
of a hand-off is from one run's RunCompleted event to the next run's
RunDequeued event (runs taken in claim order), as the database recorded
them; reported as p50, p99 and mean. Two set-ups:

- shared queue (the plain case): queue `handoff` with global_limit=1, both
  processes serve it, --runs runs submitted at once. The process that
  finishes a run records its completion and claims the next run in the same
  transaction, so hand-offs rarely cross processes; the share that do is
  reported.
- ping-pong (forced cross-process): queues `ping` and `pong` behind
  max_concurrent_runs=1, one process serving each; every run submits the
  next one into the other queue, so every hand-off is to the other process,
  which learns that the slot is free from its wake-up (or its own polling).

Baseline, measured in the same run: the same set-ups with the store's
wake-up listener replaced by a silent one inside the worker processes
(`limits_worker.py --no-wakeups`, poll interval 1 s); the ping-pong baseline
uses --baseline-runs runs, as each of its hand-offs may wait for a poll.

Idle CPU: after the shared-queue runs drain, the % of one core each of the
two worker processes uses over --idle-seconds with nothing queued (from
/proc/PID/stat, user + system, all threads; the target is < 2%), and how
many store cycles per second each makes meanwhile (1/s is the poll).
"""

from __future__ import annotations

import argparse
import time
from itertools import pairwise
from typing import Any

from rich.console import Console
from rich.table import Table

from common import fresh_database, measured_with, median, print_table, write_markdown
from limits_apps import (
    build,
    event_times,
    idle_cpu_percent,
    percentile,
    query,
    start_worker,
    stop_worker,
    wait_ready,
    worker_cycles,
)

PROCESSES = 2
MAX_WORKERS = 8
POLL = "1s"
console = Console()


def gaps(url: str, queues: list[str]) -> tuple[list[float], float]:
    """Hand-off gaps in claim order, and the share of hand-offs that went to the other process."""
    claims: dict[str, tuple[float, str]] = {}
    completions: dict[str, float] = {}
    for queue in queues:
        for run_id, kind, at, worker in event_times(url, queue, ("RunDequeued", "RunCompleted")):
            if kind == "RunDequeued":
                claims[run_id] = (at, worker or "")
            else:
                completions[run_id] = at
    order = sorted(claims, key=lambda run_id: claims[run_id][0])
    found, crossed = [], 0
    for previous, following in pairwise(order):
        found.append(claims[following][0] - completions[previous])
        crossed += claims[following][1].split(":")[1] != claims[previous][1].split(":")[1]  # by process id
    return found, crossed / max(1, len(found))


def summary(found: list[float], crossed: float) -> dict[str, float]:
    return {
        "p50": percentile(found, 0.5),
        "p99": percentile(found, 0.99),
        "mean": sum(found) / len(found),
        "min": min(found),  # below 0 would mean a run was claimed before the slot's holder completed
        "crossed": crossed,
    }


def completed(url: str, queues: list[str]) -> int:
    marks = ",".join("?" for _ in queues)
    pg_marks = ",".join("%s" for _ in queues)
    [(count,)] = query(
        url,
        f"SELECT count(*) FROM tidegate_runs WHERE status = 'completed' AND queue IN ({marks})",
        f"SELECT count(*) FROM tidegate_runs WHERE status = 'completed' AND queue IN ({pg_marks})",
        tuple(queues),
    )
    return int(count)


def wait_completed(url: str, queues: list[str], runs: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while completed(url, queues) < runs:
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out: {completed(url, queues)} of {runs} runs completed")
        time.sleep(0.05)


def shared_queue(backend: str, runs: int, wakeups: bool, idle_seconds: float) -> dict[str, float]:
    with fresh_database(backend) as url:
        app = build("handoff", url)
        app.store.migrate()
        workers = [
            start_worker(url, "handoff", ["handoff"], MAX_WORKERS, wakeups=wakeups, poll_interval=POLL)
            for _ in range(PROCESSES)
        ]
        try:
            for worker in workers:
                wait_ready(worker)
            app.tasks["handoff_noop"].submit_many([{}] * runs)
            wait_completed(url, ["handoff"], runs, timeout=300)
            found, crossed = gaps(url, ["handoff"])
            figures = summary(found, crossed)
            if idle_seconds:
                time.sleep(1.0)  # let the last cycles and notifications settle
                before = [worker_cycles(worker) for worker in workers]
                started = time.monotonic()
                figures["idle_cpu"] = median(idle_cpu_percent([w.pid for w in workers], idle_seconds))
                elapsed = time.monotonic() - started
                figures["idle_cycles"] = median(
                    [(worker_cycles(worker) - was) / elapsed for worker, was in zip(workers, before, strict=True)]
                )
        finally:
            for worker in workers:
                stop_worker(worker)
            app.close()
    return figures


def ping_pong(backend: str, runs: int, wakeups: bool) -> dict[str, float]:
    with fresh_database(backend) as url:
        app = build("pingpong", url)
        app.store.migrate()
        workers = [
            start_worker(url, "pingpong", [queue], MAX_WORKERS, wakeups=wakeups, poll_interval=POLL)
            for queue in ("ping", "pong")
        ]
        try:
            for worker in workers:
                wait_ready(worker)
            app.tasks["bounce"].submit(n=0, total=runs)
            wait_completed(url, ["ping", "pong"], runs, timeout=300 if wakeups else runs * 2.0 + 30)
            found, crossed = gaps(url, ["ping", "pong"])
        finally:
            for worker in workers:
                stop_worker(worker)
            app.close()
    return summary(found, crossed)


def store_counts(set_up: str, runs: int) -> dict[str, float]:
    """PostgreSQL, `runs` hand-offs served by in-process workers (an app and store each), traced
    (`pg_trace`): "1" and "2" workers on the shared queue, or "ping-pong" (one worker per queue).
    Per hand-off: the claiming cycles, the looks before a claim (`peek_cycle`, or `woken_cycle_look`
    in a woken cycle's first batch), the claims (cycles that could take a run: not closed by
    their look), those that found nothing, and round trips. Exact counts."""
    from pg_trace import Tracer  # PostgreSQL only: its protocol trace

    pairs = [("pingpong", ["ping"]), ("pingpong", ["pong"])]
    if set_up != "ping-pong":
        pairs = [("handoff", ["handoff"])] * int(set_up)
    with fresh_database("postgres") as url:
        apps = [build(name, url) for name, _ in pairs]
        tracers = [Tracer(app.store) for app in apps]
        serving = [
            app.worker(queues=queues, max_workers=MAX_WORKERS).start()
            for app, (_, queues) in zip(apps, pairs, strict=True)
        ]
        for tracer in tracers:
            tracer.take()
        if set_up == "ping-pong":
            apps[0].tasks["bounce"].submit(n=0, total=runs)
            wait_completed(url, ["ping", "pong"], runs, timeout=300)
        else:
            apps[0].tasks["handoff_noop"].submit_many([{}] * runs)
            wait_completed(url, ["handoff"], runs, timeout=300)
        for worker in serving:
            worker.stop()
        calls = [call for tracer in tracers for call in tracer.take()]
        for tracer, app in zip(tracers, apps, strict=True):
            tracer.close()
            app.close()

    def sent(call: Any, *names: str) -> bool:
        return any(statement.name in names for statement in call.statements)

    def closed(call: Any) -> bool:  # the look took no claim turn: the claim after it took nothing
        return sent(call, "woken_cycle_look") and not any(s.name == "claim_turn" and s.rows for s in call.statements)

    verbs = [call for call in calls if call.verb.endswith(("Claims.cycle", "woken_cycle", "peek_cycle"))]
    peeks = [call for call in verbs if sent(call, "peek_cycle")]  # a look of its own
    cycles = [call for call in verbs if not sent(call, "peek_cycle")]
    looks = peeks + [call for call in cycles if sent(call, "woken_cycle_look")]
    claims = [c for c in cycles if sent(c, "claim_window", "claim_runs_free") and not closed(c)]
    empty = [c for c in claims if not any(s.name in ("claim_runs", "claim_runs_free") and s.rows for s in c.statements)]
    return {
        "cycles": len(cycles) / runs,
        "claims": len(claims) / runs,
        "looks": len(looks) / runs,
        "futile_claims": len(empty) / runs,
        "round_trips": sum(call.round_trips for call in cycles + peeks) / runs,
    }


def print_counts(runs: int) -> None:
    for set_up in ("1", "2", "ping-pong"):
        figures = store_counts(set_up, runs)
        console.print(
            f"{set_up} (in-process workers), per hand-off: "
            + ", ".join(f"{key} {value:.3f}" for key, value in figures.items())
        )


def measure(backend: str, runs: int, baseline_runs: int, idle_seconds: float) -> dict[str, float]:
    figures: dict[str, float] = {}
    for prefix, result in (
        ("shared", shared_queue(backend, runs, True, idle_seconds)),
        ("shared_base", shared_queue(backend, runs, False, 0.0)),
        ("ping", ping_pong(backend, runs, True)),
        ("ping_base", ping_pong(backend, baseline_runs, False)),
    ):
        for key, value in result.items():
            figures[f"{prefix}_{key}"] = value
    return figures


def repeated(backend: str, options: argparse.Namespace) -> dict[str, float]:
    """Medians over --repeat measurements (the smallest gap: the minimum)."""
    samples = []
    for attempt in range(options.repeat):
        console.print(f"[dim]{backend}: run {attempt + 1} of {options.repeat}[/]")
        samples.append(measure(backend, options.runs, options.baseline_runs, options.idle_seconds))
        console.print(f"[dim]  { {key: round(value, 5) for key, value in samples[-1].items()} }[/]")
    figures = {key: median([sample[key] for sample in samples]) for key in samples[0]}
    for key in ("shared_min", "ping_min"):
        figures[key] = min(sample[key] for sample in samples)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--baseline-runs", type=int, default=20)
    parser.add_argument("--idle-seconds", type=float, default=10.0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--counts", type=int, default=0, help="only the traced store counts, over this many runs")
    options = parser.parse_args()
    if options.counts:
        print_counts(options.counts)
        return
    results = {backend: repeated(backend, options) for backend in options.backends.split(",")}

    def ms(value: float) -> str:
        return f"{value * 1000:.2f} ms"

    header = [
        "backend",
        "set-up",
        "runs",
        "gap p50",
        "gap p99",
        "gap mean",
        "gap min",
        "to the other process",
        "baseline: no wake-ups, p50",
        "baseline p99",
        "baseline mean",
        "mean / baseline mean",
    ]
    rows = []
    for backend, f in results.items():
        for label, key, runs, base_runs in (
            ("shared queue, global_limit=1", "shared", options.runs, options.runs),
            ("ping-pong, max_concurrent_runs=1", "ping", options.runs, options.baseline_runs),
        ):
            base = f[f"{key}_base_mean"]
            rows.append(
                [
                    backend,
                    label,
                    f"{runs} ({base_runs} baseline)",
                    ms(f[f"{key}_p50"]),
                    ms(f[f"{key}_p99"]),
                    ms(f[f"{key}_mean"]),
                    ms(f[f"{key}_min"]),
                    f"{f[f'{key}_crossed']:.0%}",
                    ms(f[f"{key}_base_p50"]),
                    ms(f[f"{key}_base_p99"]),
                    ms(base),
                    f"{f[f'{key}_mean'] / base:.3f}" if base > 0 else "-",
                ]
            )
    title = f"Hand-off under limit 1, {PROCESSES} worker processes, median of {options.repeat}"
    print_table(console, title, header, rows, left=("backend", "set-up"))
    idle = Table(title=f"Idle worker CPU over {options.idle_seconds:.0f} s (target < 2% of a core)")
    idle.add_column("backend")
    idle.add_column("CPU, % of one core", justify="right")
    idle.add_column("store cycles/s", justify="right")
    for backend, f in results.items():
        idle.add_row(backend, f"{f['shared_idle_cpu']:.2f}%", f"{f['shared_idle_cycles']:.2f}")
    console.print(idle)
    notes = [
        "",
        f"Idle worker CPU over {options.idle_seconds:.0f} s with nothing queued (median of the two processes, then "
        "of the repeats), % of one core; the target is < 2%: "
        + ", ".join(
            f"{backend} {f['shared_idle_cpu']:.2f}% ({f['shared_idle_cycles']:.2f} store cycles/s)"
            for backend, f in results.items()
        )
        + ".",
        "",
        measured_with("python benchmarks/handoff.py"),
        "Gap: from a run's RunCompleted to the next run's RunDequeued (claim order), database timestamps; p99 is "
        "nearest-rank. 'To the other process' is the share of hand-offs where the next run was claimed by the "
        "other worker process. Gap min is the smallest over all repeats: the database stamps an event with the "
        "time its transaction began (PostgreSQL's now(); SQLite's adapter reads the clock before BEGIN IMMEDIATE "
        "waits for the lock), so a claim that waited for the completing transaction's lock can carry an earlier "
        "time than that completion, and a gap can come out slightly negative without any overlap.",
        f"Worker processes run max_workers={MAX_WORKERS} and poll every {POLL}. The baseline replaces the store's "
        "wake-up listener with a silent one inside the worker processes (no change to tidegate itself); the "
        "workers' own local wake-ups, polls and next-due hints remain.",
        "Without wake-ups the ping-pong gaps phase-lock to the two processes' 1 s polls (a gap g is followed by "
        "about 1 s - g), so its p50 depends on the initial phase: read its mean, about half the poll interval.",
    ]
    path = write_markdown("handoff", title, header, rows, notes)
    console.print(f"written to {path}")


if __name__ == "__main__":
    main()
