"""Does re-planning cost a submit or a claim its speed? plan_cache_mode A/B, interleaved (issue 16, lever 1).

    python benchmarks/plan_cache_ab.py [--blocks 10] [--calls 40]

`profile_postgres.py` finds `enqueue`, `claim_window`, `claim_runs` and
`next_due` planned again at (nearly) every call. Here the same app, on one
pooled connection, switches that connection's `plan_cache_mode` between
`auto` (what tidegate runs with), `force_generic_plan` and
`force_custom_plan` block by block, interleaved so that the machine's drift
hits each mode alike. Measured per call: `submit()` of one run, and a claim
turn of 8 followed by the completion of the 8 (no limit, and a queue limit of
4); and, beside --backlog runs blocked behind saturated partitions (after
ANALYZE), the submit, claim and completion of one eligible run: a generic
plan must not walk the blocked backlog. Medians per mode, and each as a ratio to `auto`.
Writes benchmarks/results/plan_cache_ab.md.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import psycopg
from rich.console import Console

import tidegate
from blocked_backlog import fill
from common import fresh_database, measured_with, write_markdown
from pg_trace import Tracer
from profile_postgres import LEASE, SLOTS, WORKER, fences, limited_app, outcomes
from tidegate.domain.model import CycleRequest, WorkerRegistration

MODES = ("auto", "force_generic_plan", "force_custom_plan")
console = Console()


def set_mode(app: tidegate.App, mode: str) -> None:
    """Set the mode on the pool's one connection (the store opens with min_size 1 and is used by one thread)."""
    tracer = Tracer(app.store)  # only for its access to the store's connection seam
    try:
        with tracer.raw_connection() as connection:
            connection.execute(f"SET plan_cache_mode = {mode}")
    finally:
        tracer.close()


def turn(app: tidegate.App) -> None:
    store = app.store
    claimed = store.cycle(CycleRequest(WORKER, ["work"], [], [], SLOTS, LEASE)).claimed
    store.cycle(CycleRequest(WORKER, ["work"], fences(list(claimed)), outcomes(list(claimed)), 0, LEASE))


def eligible(app: tidegate.App, counter: list[int]) -> None:
    """Submit one run of a partition of its own, claim it beside the blocked backlog, complete it."""
    counter[0] += 1
    app.tasks["backlog_noop"].submit(p=f"eligible-{counter[0]}")
    store = app.store
    claimed = list(store.cycle(CycleRequest(WORKER, ["blocked"], [], [], 1, LEASE)).claimed)
    store.cycle(CycleRequest(WORKER, ["blocked"], fences(claimed), outcomes(claimed), 0, LEASE))


def measure(kind: str, blocks: int, calls: int, backlog: int) -> dict[str, dict[str, float]]:
    with fresh_database("postgres") as url:
        ops: dict[str, Callable[[], object]]
        if kind == "blocked":
            app, _ = fill(url, backlog, 5000)
            with psycopg.connect(url, autocommit=True) as connection:
                connection.execute("ANALYZE tidegate_runs")
            counter = [0]
            ops = {f"submit + claim 1 + complete beside {backlog:,} blocked": lambda: eligible(app, counter)}
        else:
            app, task = limited_app(kind, url)
            task.submit_many([{"i": i} for i in range(blocks * len(MODES) * calls * SLOTS + 100)])
            ops = {"submit": lambda: task.submit(i=0), "claim 8 + complete": lambda: turn(app)}
        app.store.register_worker(WorkerRegistration(WORKER, SLOTS, ["work", "blocked"], False, LEASE))
        samples: dict[str, dict[str, list[float]]] = {op: {mode: [] for mode in MODES} for op in ops}
        for _ in range(blocks):
            for mode in MODES:
                set_mode(app, mode)
                for op, call in ops.items():
                    for _ in range(calls):
                        started = time.perf_counter()
                        call()
                        samples[op][mode].append((time.perf_counter() - started) * 1000)
        app.close()
    return {op: {mode: statistics.median(times) for mode, times in by_mode.items()} for op, by_mode in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--blocks", type=int, default=10)
    parser.add_argument("--calls", type=int, default=40)
    parser.add_argument("--backlog", type=int, default=100_000)
    options = parser.parse_args()
    rows = []
    for kind in ("no limit", "queue limit", "blocked"):
        console.print(f"[dim]{kind}[/]")
        for op, by_mode in measure(kind, options.blocks, options.calls, options.backlog).items():
            base = by_mode["auto"]
            cells = [f"{by_mode[mode]:.3f} ms ({by_mode[mode] / base:.2f})" for mode in MODES]
            rows.append([op if kind == "blocked" else f"{op} ({kind})", *cells])
    notes = [
        measured_with(
            "python benchmarks/plan_cache_ab.py "
            f"--blocks {options.blocks} --calls {options.calls} --backlog {options.backlog}"
        ),
        "",
        "Median ms per call, (ratio to auto). Modes interleaved block by block on one connection; the",
        "machine is shared, so only the ratios within a row mean anything.",
    ]
    path = write_markdown(
        "plan_cache_ab", "plan_cache_mode A/B: submit and claim turns", ["operation", *MODES], rows, notes
    )
    console.print(path.read_text())


if __name__ == "__main__":
    main()
