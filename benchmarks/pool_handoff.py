"""Hand-off through a pool of limit 1: from one holder's release to the next holder's acquire.

    python benchmarks/pool_handoff.py [--handoffs 200] [--repeat 3] [--backends sqlite,postgres]

Two processes, each with its own PoolGuard (the default claim policy: poll
every 1 s plus up to 500 ms of jitter), take turns at one slot of pool
`handoff` (limit 1). While one holds the slot (20 ms), the other has already
asked and been refused, so it waits in the guard; the holder then releases,
and the gap is from just before its `release` call (so the release's own
transaction is counted) to the moment the waiter's `acquire` returns holding
the slot: what a step that waits for a pool sees. Times are
`time.monotonic()`, which on Linux is one clock for every process. Every
hand-off goes to the other process, so it travels through the store's
wake-up (SQLite datagrams, PostgreSQL NOTIFY).

Baseline, in the same run: the same with the waiters' wake-up subscription
replaced by a silent one (the guard then finds the slot free only at its next
poll), over --baseline-handoffs hand-offs.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import time
from collections.abc import Callable
from itertools import pairwise
from typing import Any

from rich.console import Console

from common import fresh_database, measured_with, medians, parse_options, print_table, repeated, write_markdown
from limits_apps import percentile
from pool_apps import prepare
from tidegate.bootstrap import open_store
from tidegate.domain.pools import pool_needs
from tidegate.engine.runtime.pools import ClaimPolicy, PoolGuard
from tidegate.storage.port import Store

POOL = "handoff"
HOLD = 0.02  # long enough for the other process to be refused and waiting before each release
console = Console()


class _Silent:
    def close(self) -> None:
        """Nothing to stop: it never listened."""


class NoWakeups:
    """The store with its wake-up subscription replaced by a silent one (the baseline)."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def listen(self, callback: Callable[[], None], own: str | None = None) -> _Silent:
        return _Silent()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def taker(url: str, fence: tuple[str, int], me: int, turns: int, wakeups: bool, turn: Any, out: Any) -> None:
    """Take the slot on every other turn; put [(acquired, release called)] for the turns taken."""
    store = open_store(url, migrate=False)
    guard = PoolGuard(store if wakeups else NoWakeups(store), ClaimPolicy())
    try:
        held = asyncio.run(take_turns(guard, fence, me, turns, turn))
    finally:
        guard.close()
        store.close()
    out.put(held)


def wait_for_turn(turn: Any, index: int) -> None:
    """Until the other process holds the slot (it sets `turn` to `index` once it has it)."""
    while turn.value < index:
        time.sleep(0.0002)


async def take_turns(
    guard: PoolGuard, fence: tuple[str, int], me: int, turns: int, turn: Any
) -> list[tuple[float, float]]:
    """On one event loop, as a worker's steps wait: [(acquired, release called)] for the turns taken."""
    needs = pool_needs({POOL: 1})
    held = []
    for index in range(me, turns, 2):
        wait_for_turn(turn, index)
        hold = await guard.acquire(fence, f"taker-{me}", f"turn[{index}]", needs)
        acquired = time.monotonic()
        with turn.get_lock():
            turn.value = index + 1
        await asyncio.sleep(HOLD)
        released = time.monotonic()
        guard.release(hold)
        held.append((acquired, released))
    return held


def measure(backend: str, handoffs: int, wakeups: bool) -> list[float]:
    context = multiprocessing.get_context("spawn")
    with fresh_database(backend) as url:
        fences = prepare(url, {POOL: 1}, 2)
        turn = context.Value("i", 0)
        out = context.Queue()
        turns = handoffs + 1
        children = [
            context.Process(target=taker, args=(url, fences[me], me, turns, wakeups, turn, out)) for me in (0, 1)
        ]
        for child in children:
            child.start()
        holds = sorted(hold for _ in children for hold in out.get(timeout=600))
        for child in children:
            child.join(30)
    assert len(holds) == turns
    return [following[0] - previous[1] for previous, following in pairwise(holds)]


def summary(gaps: list[float]) -> dict[str, float]:
    return {
        "p50": percentile(gaps, 0.5),
        "p99": percentile(gaps, 0.99),
        "mean": sum(gaps) / len(gaps),
        "max": max(gaps),
    }


def _options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--handoffs", type=int, default=200)
    parser.add_argument("--baseline-handoffs", type=int, default=10)


def sample(backend: str, handoffs: int, baseline_handoffs: int) -> dict[str, float]:
    """One repeat: hand-offs with wake-ups, then the poll-only baseline (its keys prefixed base_)."""
    figures = summary(measure(backend, handoffs, wakeups=True))
    base = summary(measure(backend, baseline_handoffs, wakeups=False))
    figures.update({f"base_{key}": value for key, value in base.items()})
    return figures


def main() -> None:
    options = parse_options(__doc__, runs=None, extra=_options)
    rows = []
    measured = repeated(
        options.backends, options.repeat, lambda b: sample(b, options.handoffs, options.baseline_handoffs), console
    )
    for backend, samples in measured.items():
        f = medians(samples)

        def ms(value: float) -> str:
            return f"{value * 1000:.2f} ms"

        rows.append(
            [
                backend,
                str(options.handoffs),
                ms(f["p50"]),
                ms(f["p99"]),
                ms(f["mean"]),
                ms(f["max"]),
                ms(f["base_p50"]),
                ms(f["base_p99"]),
                ms(f["base_mean"]),
                f"{f['base_mean'] / f['mean']:.0f}x",
            ]
        )
    header = [
        "backend",
        "hand-offs",
        "p50",
        "p99",
        "mean",
        "max",
        "baseline: poll only, p50",
        "baseline p99",
        "baseline mean",
        "baseline mean / mean",
    ]
    title = f"Pool hand-off, limit 1, two processes alternating, median of {options.repeat}"
    print_table(console, title, header, rows)
    notes = [
        "",
        measured_with(f"python benchmarks/pool_handoff.py --handoffs {options.handoffs} --repeat {options.repeat}"),
        "Gap: from just before the holder's `PoolGuard.release` (its transaction included) to the return of the "
        "waiter's `await PoolGuard.acquire` holding the slot; every hand-off is to the other process, which was "
        f"refused and waiting in the guard. Holders keep the slot {HOLD * 1000:.0f} ms. p99 is nearest-rank; "
        "max is the median over repeats of each run's largest gap. The aim is p99 < 10 ms.",
        f"Baseline ({options.baseline_handoffs} hand-offs per run): the waiters' wake-up subscription is replaced "
        "by a silent one, so only the guard's poll (TIDEGATE_CLAIM_POLL_INTERVAL 1 s + up to 500 ms jitter) "
        "finds the free slot.",
    ]
    path = write_markdown("pool_handoff", title, header, rows, notes)
    console.print(f"written to {path}")


if __name__ == "__main__":
    main()
