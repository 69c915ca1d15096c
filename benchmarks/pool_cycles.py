"""Pool claim + release cycles per second, through the PoolGuard.

    python benchmarks/pool_cycles.py [--seconds 3] [--repeat 3] [--backends sqlite,postgres]

Each process loops on one event loop, as a worker's steps do: `await guard.acquire`
one slot of pool `bench` (all or none, fenced, with its StepSlotClaimed event), then `guard.release` it (with
StepSlotReleased and a wake-up for waiters); a cycle is one of each, every
step with its own key. Counted over --seconds after a common start. Set-ups:

- 1 process, limit 1: the cost of a cycle, never waiting;
- 2 processes, limit 2: both claim the same pool at once (on PostgreSQL they
  queue on its scope row lock; on SQLite on the single writer), rarely refused;
- 2 processes, limit 1: every cycle may find the slot taken and wait for the
  other's release (the wake-up path), the worst case for one pool.

Baseline, in the same run: one process doing the same two transactions with
no pool logic (`record_step` running then completed of a step: two fenced
upserts with their events), i.e. what any two fenced writes with events cost.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import time
from typing import Any

from rich.console import Console

from common import fresh_database, measured_with, median, parse_options, print_table, write_markdown
from pool_apps import prepare
from tidegate.bootstrap import open_store
from tidegate.domain.pools import pool_needs
from tidegate.domain.steps import StepStatus, StepUpdate
from tidegate.engine.runtime.pools import ClaimPolicy, PoolGuard
from tidegate.storage.port import Store

POOL = "bench"
SETUPS = [("1 process, limit 1", 1, 1), ("2 processes, limit 2", 2, 2), ("2 processes, limit 1", 2, 1)]
POLICY = ClaimPolicy(timeout=60, poll_interval=1.0, poll_jitter=0.5)
console = Console()


def contender(url: str, fence: tuple[str, int], start_at: float, seconds: float, baseline: bool, out: Any) -> None:
    """Cycle until the window ends; put the cycles completed inside it."""
    store = open_store(url, migrate=False)
    guard = PoolGuard(store, POLICY)
    while time.time() < start_at:
        time.sleep(0.0005)
    try:
        counted = asyncio.run(cycles(store, guard, fence, start_at + seconds, baseline))
    finally:
        guard.close()
        store.close()
    out.put(counted)


async def cycles(store: Store, guard: PoolGuard, fence: tuple[str, int], end: float, baseline: bool) -> int:
    """The cycles completed from now until `end` (wall clock)."""
    needs = pool_needs({POOL: 1})
    worker = f"bench-{os.getpid()}"
    index = counted = 0
    while True:
        key = f"c[{index}]"
        if baseline:
            store.record_steps(fence, [StepUpdate(key, StepStatus.RUNNING)])
            store.record_steps(fence, [StepUpdate(key, StepStatus.COMPLETED)])
        else:
            guard.release(await guard.acquire(fence, worker, key, needs))
        index += 1
        if time.time() >= end:
            return counted
        counted += 1


def measure(backend: str, processes: int, limit: int, seconds: float, baseline: bool = False) -> float:
    context = multiprocessing.get_context("spawn")
    with fresh_database(backend) as url:
        fences = prepare(url, {POOL: limit}, processes)
        out = context.Queue()
        start_at = time.time() + 2.0  # after every process has imported and connected
        children = [
            context.Process(target=contender, args=(url, fence, start_at, seconds, baseline, out)) for fence in fences
        ]
        for child in children:
            child.start()
        total: int = sum(out.get(timeout=seconds + 120) for _ in children)
        for child in children:
            child.join(30)
    return total / seconds


def main() -> None:
    options = parse_options(
        __doc__, runs=None, extra=lambda parser: parser.add_argument("--seconds", type=float, default=3.0)
    )
    rows = []
    for backend in options.backends.split(","):
        samples: dict[str, list[float]] = {}
        for attempt in range(options.repeat):
            console.print(f"[dim]{backend}: run {attempt + 1} of {options.repeat}[/]")
            for label, processes, limit in SETUPS:
                samples.setdefault(label, []).append(measure(backend, processes, limit, options.seconds))
            samples.setdefault("baseline", []).append(measure(backend, 1, 1, options.seconds, baseline=True))
            console.print(f"[dim]  { {key: round(values[-1]) for key, values in samples.items()} }[/]")
        base = median(samples["baseline"])
        for label, _, _ in SETUPS:
            figure = median(samples[label])
            rows.append([backend, label, f"{figure:,.0f}", f"{base:,.0f}", f"{figure / base:.2f}"])
    header = ["backend", "set-up", "cycles/s", "baseline: 2 fenced writes/s", "cycles / baseline"]
    title = f"Pool claim + release cycles per second, median of {options.repeat}"
    print_table(console, title, header, rows, left=("backend", "set-up"))
    notes = [
        "",
        measured_with(f"python benchmarks/pool_cycles.py --seconds {options.seconds:g} --repeat {options.repeat}"),
        "A cycle is `await PoolGuard.acquire` of one slot of one pool then `PoolGuard.release`: two store "
        "transactions, each fenced on the run's (id, attempt), writing or deleting the holder row and its "
        "StepSlotClaimed / StepSlotReleased event; on PostgreSQL the claim locks the pool's scope row, then "
        "reads the limit and the holders' sum (two round trips), the release is one statement with its NOTIFY. "
        f"Cycles completed by all processes within a common {options.seconds:g} s window.",
        "Baseline: one process, two fenced `record_step` upserts with their events per cycle (no pool logic).",
        "The aim is >= 1,400 cycles/s on SQLite (one process).",
    ]
    path = write_markdown("pool_cycles", title, header, rows, notes)
    console.print(f"written to {path}")


if __name__ == "__main__":
    main()
