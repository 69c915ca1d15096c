"""The client side of the PostgreSQL profile: a worker draining, a submit loop, and the hand-off at limit 1.

    python benchmarks/profile_worker.py [--runs 2000] [--submits 500] [--handoffs 150] [--skip-processes]

Companion of `profile_postgres.py` (which counts each store verb alone).
Here tidegate runs as a user runs it, through its public API, on a fresh
schema each time:

- drain: --runs no-op async runs (no limit, then a queue limit of 4), one
  worker in this process (`app.worker(max_workers=8, drain=True)`): runs/s
  untraced; then with `pg_trace.Tracer` on the store: cycles, round trips
  and statements per run; then under cProfile in every thread: where the
  process's time goes (tidegate's Python, psycopg and the pool, other Python,
  blocked on the server inside psycopg, idle in the event loop or a lock);
- submit: --submits calls of `submit()` one run each, timed, then profiled
  the same way;
- hand-off at limit 1: --handoffs runs through `global_limit=1`, served by
  one worker, then by two workers (two apps, each its own store, in this
  process: the counts are the same as with two processes, the times are
  not), traced: store cycles per hand-off, claims that found the slot taken,
  and the share handed to the other worker; then the real two processes of
  `benchmarks/handoff.py` (shared queue and ping-pong) for the gap p50/p99.

cProfile roughly doubles the cost of Python calls: read its split as shares,
not as times. The machine is shared: compare figures within one run.
Writes benchmarks/results/postgres_worker_profile.md and .json.
"""

from __future__ import annotations

import argparse
import cProfile
import itertools
import json
import pstats
import statistics
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from rich.console import Console

import handoff
import tidegate
from common import RESULTS, fresh_database, measured_with
from limits_apps import build, event_times, percentile
from pg_trace import Checkout, Tracer
from tidegate import Concurrency

console = Console()
SLOTS = 8
LIMIT = 4
CATEGORIES = ("tidegate", "psycopg + pool", "other Python", "blocked on the server", "idle (loop, locks, sleep)")


def drain_app(url: str, limit: int | None) -> tuple[tidegate.App, tidegate.Task]:
    app = tidegate.App(url)
    app.queue("work", concurrency=Concurrency(global_limit=limit) if limit else None)

    @app.task(queue="work", name="noop")
    async def noop(i: int = 0) -> None:
        """Zero work: the drain is all overhead."""

    return app, noop


@contextmanager
def profiled_threads() -> Iterator[list[cProfile.Profile]]:
    """cProfile in this thread and in every thread started meanwhile (each its own profile)."""
    profiles: list[cProfile.Profile] = []

    def start(frame: Any, event: str, arg: Any) -> None:
        profile = cProfile.Profile()
        profiles.append(profile)
        profile.enable()  # replaces this hook in the new thread

    main = cProfile.Profile()
    profiles.append(main)
    threading.setprofile(start)
    main.enable()
    try:
        yield profiles
    finally:
        main.disable()
        threading.setprofile(None)


def category(path: str, function: str) -> str:
    where = f"{path} {function}"
    if path.endswith(("psycopg/connection.py", "psycopg/waiting.py")) and function.startswith("wait"):
        # Connection.wait hands the generator to the compiled wait_c, which cProfile does not see: its
        # self time is the client blocked until the server's answer is readable
        return "blocked on the server"
    idle = ("epoll", "select.", "'acquire' of '_thread", "time.sleep", "_thread.lock", "'get' of '_queue.SimpleQueue'")
    if any(marker in where for marker in idle):
        return "idle (loop, locks, sleep)"
    if "/tidegate/" in path:
        return "tidegate"
    if "psycopg" in where:
        return "psycopg + pool"
    return "other Python"


def split(profiles: list[cProfile.Profile]) -> tuple[dict[str, float], list[tuple[str, float]]]:
    """Self time per category (seconds), and the busiest tidegate functions."""
    totals = dict.fromkeys(CATEGORIES, 0.0)
    mine: dict[str, float] = {}
    for profile in profiles:
        profile.create_stats()
        stats: dict[tuple[str, int, str], tuple[int, int, float, float, Any]] = pstats.Stats(profile).stats  # type: ignore[attr-defined]
        for (path, line, function), (_, _, own, _, _) in stats.items():
            kind = category(path, function)
            totals[kind] += own
            if kind == "tidegate":
                short = f"{path.split('/tidegate/')[-1]}:{line} {function}"
                mine[short] = mine.get(short, 0.0) + own
    return totals, sorted(mine.items(), key=lambda item: -item[1])[:8]


def drain(limit: int | None, runs: int, mode: str) -> dict[str, Any]:
    """Drain `runs` no-op runs with one in-process worker: untraced, traced or profiled."""
    with fresh_database("postgres") as url:
        app, task = drain_app(url, limit)
        for offset in range(0, runs, 1000):
            task.submit_many([{"i": i} for i in range(offset, min(runs, offset + 1000))])
        tracer = Tracer(app.store) if mode == "traced" else None
        figures: dict[str, Any] = {}
        with profiled_threads() if mode == "profiled" else _nothing() as profiles:
            worker = app.worker(queues=["work"], max_workers=SLOTS, drain=True)
            started = time.perf_counter()
            worker.start()
            worker.join(300)
            figures["runs_per_s"] = runs / (time.perf_counter() - started)
        if tracer is not None:
            figures.update(per_run(tracer.take(), runs))
            tracer.close()
        if profiles:
            figures["split"], figures["top"] = split(profiles)
        app.close()
    return figures


@contextmanager
def _nothing() -> Iterator[list[cProfile.Profile]]:
    yield []


def per_run(checkouts: list[Checkout], runs: int) -> dict[str, Any]:
    cycles = [c for c in checkouts if c.verb.endswith("cycle")]
    return {
        "cycles_per_run": len(cycles) / runs,
        "round_trips_per_run": sum(c.round_trips for c in checkouts) / runs,
        "statements_per_run": sum(len(c.statements) for c in checkouts) / runs,
        "cycle_round_trips": statistics.mean(c.round_trips for c in cycles),
        "other_checkouts": len(checkouts) - len(cycles),
        "other_verbs": dict(Counter(c.verb for c in checkouts if not c.verb.endswith("cycle"))),
    }


def submits(count: int) -> dict[str, Any]:
    with fresh_database("postgres") as url:
        app, task = drain_app(url, None)
        task.submit(i=-1)  # registers the task and limits
        times = []
        for index in range(count):
            started = time.perf_counter()
            task.submit(i=index)
            times.append(time.perf_counter() - started)
        with profiled_threads() as profiles:
            for index in range(count):
                task.submit(i=index)
        totals, top = split(profiles)
        app.close()
    return {"submits_per_s": 1 / statistics.median(times), "split": totals, "top": top}


def handoff_counts(workers: int, runs: int) -> dict[str, float]:
    """`runs` runs through one slot, served by `workers` in-process workers (one app and store each), traced."""
    with fresh_database("postgres") as url:
        apps = [build("handoff", url) for _ in range(workers)]
        tracers = [Tracer(app.store) for app in apps]
        serving = [app.worker(queues=["handoff"], max_workers=SLOTS).start() for app in apps]
        for tracer in tracers:
            tracer.take()
        apps[0].tasks["handoff_noop"].submit_many([{}] * runs)
        handoff.wait_completed(url, ["handoff"], runs, timeout=300)
        for worker in serving:
            worker.stop()
        cycles = [[c for c in tracer.take() if c.verb.endswith("cycle")] for tracer in tracers]
        gaps, crossed = handoff_gaps(url)
        for tracer, app in zip(tracers, apps, strict=True):
            tracer.close()
            app.close()
    claims = [[c for c in mine if any(s.name == "claim_window" for s in c.statements)] for mine in cycles]
    empty = [[c for c in mine if not any(s.name == "claim_runs" and s.rows for s in c.statements)] for mine in claims]
    figures = {
        "p50_ms": percentile(gaps, 0.5) * 1000,
        "p99_ms": percentile(gaps, 0.99) * 1000,
        "crossed": crossed,
        "cycles_per_run": sum(map(len, cycles)) / runs,
        "empty_claims_per_run": sum(map(len, empty)) / runs,
        "round_trips_per_run": sum(c.round_trips for mine in cycles for c in mine) / runs,
    }
    for index, mine in enumerate(cycles):
        figures[f"worker{index}_cycles"] = len(mine)
        figures[f"worker{index}_empty_claims"] = len(empty[index])
    return figures


def handoff_gaps(url: str) -> tuple[list[float], float]:
    """Gaps from a run's completion to the next claim, and the share claimed by another worker (by full id)."""
    claims: dict[str, tuple[float, str]] = {}
    completions: dict[str, float] = {}
    for run_id, kind, at, worker in event_times(url, "handoff", ("RunDequeued", "RunCompleted")):
        if kind == "RunDequeued":
            claims[run_id] = (at, worker or "")
        else:
            completions[run_id] = at
    order = sorted(claims, key=lambda run_id: claims[run_id][0])
    gaps = [claims[b][0] - completions[a] for a, b in itertools.pairwise(order)]
    crossed = sum(claims[b][1] != claims[a][1] for a, b in itertools.pairwise(order))
    return gaps, crossed / max(1, len(gaps))


def seconds(text: float) -> str:
    return f"{text * 1000:.1f} ms"


def report(results: dict[str, Any], command: str) -> str:
    lines = ["# PostgreSQL profile: the worker, the submit loop and the hand-off", "", measured_with(command), ""]
    lines += ["## Where the client's time goes (cProfile, self time over every thread, idle threads left out)", ""]
    busy = CATEGORIES[:-1]
    lines += ["| workload | rate | " + " | ".join(busy) + " | busy s |", "|---" * (len(busy) + 3) + "|"]
    for name, figures in results["profiled"].items():
        total = sum(figures["split"][kind] for kind in busy) or 1.0
        shares = " | ".join(f"{figures['split'][kind] / total:.0%}" for kind in busy)
        lines.append(f"| {name} | {figures['rate']:.0f}/s | {shares} | {total:.2f} |")
    lines += [
        "",
        "Blocked on the server is the self time of psycopg's `Connection.wait` (the compiled wait releases",
        "the GIL while the socket is not readable, and takes it back after): server, network, and the wait",
        "for the GIL when another thread (the worker's event loop) holds it.",
    ]
    lines += ["", "Busiest tidegate functions (self seconds under cProfile):", ""]
    for name, figures in results["profiled"].items():
        lines.append(f"- {name}: " + ", ".join(f"`{where}` {own:.2f}" for where, own in figures["top"][:5]))
    lines += [
        "",
        "## Drain, traced (exact counts)",
        "",
        "| workload | runs/s untraced | cycles/run | round trips/run |",
    ]
    lines += ["|---|---|---|---|"]
    for name, figures in results["traced"].items():
        lines.append(
            f"| {name} | {figures['runs_per_s']:.0f} | {figures['cycles_per_run']:.3f} "
            f"| {figures['round_trips_per_run']:.3f} |"
        )
    lines += ["", "## Hand-off at limit 1", "", "| set-up | p50 | p99 | to the other worker | cycles/run |"]
    lines += ["|---|---|---|---|---|"]
    for name, figures in results["handoff"].items():
        cycles = figures.get("cycles_per_run")
        lines.append(
            f"| {name} | {figures['p50_ms']:.1f} ms | {figures['p99_ms']:.1f} ms | {figures['crossed']:.0%} "
            f"| {'-' if cycles is None else f'{cycles:.2f}'} |"
        )
    lines += ["", "In-process rows: raw counts per worker in postgres_worker_profile.json.", ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--submits", type=int, default=500)
    parser.add_argument("--handoffs", type=int, default=150)
    parser.add_argument("--skip-processes", action="store_true")
    options = parser.parse_args()
    results: dict[str, Any] = {"profiled": {}, "traced": {}, "handoff": {}}
    for name, limit in (("drain, no limit", None), (f"drain, queue limit {LIMIT}", LIMIT)):
        console.print(f"[dim]{name}[/]")
        plain = drain(limit, options.runs, "plain")
        results["traced"][name] = {**drain(limit, options.runs, "traced"), "runs_per_s": plain["runs_per_s"]}
        profiled = drain(limit, options.runs, "profiled")
        results["profiled"][name] = {"rate": plain["runs_per_s"], "split": profiled["split"], "top": profiled["top"]}
    console.print("[dim]submits[/]")
    submitted = submits(options.submits)
    results["profiled"]["submit, one call per run"] = {
        "rate": submitted["submits_per_s"],
        "split": submitted["split"],
        "top": submitted["top"],
    }
    for workers in (1, 2):
        console.print(f"[dim]hand-off, {workers} in-process workers[/]")
        results["handoff"][f"{workers} worker(s), one process"] = handoff_counts(workers, options.handoffs)
    if not options.skip_processes:
        console.print("[dim]hand-off, two worker processes (benchmarks/handoff.py)[/]")
        for name, figures in (
            ("2 processes, shared queue", handoff.shared_queue("postgres", options.handoffs, True, 0.0)),
            ("2 processes, ping-pong", handoff.ping_pong("postgres", options.handoffs, True)),
        ):
            results["handoff"][name] = {"p50_ms": figures["p50"] * 1000, "p99_ms": figures["p99"] * 1000, **figures}
    command = f"python benchmarks/profile_worker.py --runs {options.runs} --handoffs {options.handoffs}"
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "postgres_worker_profile.md").write_text(report(results, command))
    (RESULTS / "postgres_worker_profile.json").write_text(json.dumps(results, indent=1, default=str) + "\n")
    console.print(report(results, command))


if __name__ == "__main__":
    main()
