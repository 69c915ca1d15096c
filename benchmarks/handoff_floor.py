"""The floor under W2's ideal/actual: what its hand-offs cost with no limit to keep at all.

    python benchmarks/handoff_floor.py [--runs 400] [--repeat 3] [--backends sqlite,postgres]

W2 (`../shared/bench-peers/`; issue 29 asks ideal/actual >= 0.95) is --runs async runs of
`await asyncio.sleep(0.05)`, 4 at a time, so ideal = runs x 50 ms / 4. Each rep measures, in
this order and each on a fresh database:

- `asyncio`: the same sleeps on 4 lanes of one event loop, no store: the sleep's own overshoot;
- `free`: no limit, one worker in this process with max_workers=4. The 4 slots are the only
  cap, so a freed slot is refilled by the worker's free claim (one statement and its commit)
  or by a run it claimed ahead (no store at all): the cheapest hand-off tidegate has;
- `limited`: a global limit of 4 and max_workers=8, as the harness runs W2: each freed slot
  of the limit goes through a report-and-claim cycle that reads the limit's usage.

Reported per backend, medians over --repeat: ideal/actual of each (first start to last end,
as the harness measures it) and the most runs seen running at once (4 is the limit).
If `free` is under the aim, no gate however cheap meets it: a hand-off would have to skip
the store's commit.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time

from rich.console import Console

import tidegate
from common import fresh_database, max_overlap, measured_with, median, parse_options, print_table, write_markdown

SLOTS = 4
SLEEP = 0.05
console = Console()
WAYS = ("asyncio", "free", "limited")


def on_asyncio(runs: int) -> list[tuple[float, float]]:
    """The sleeps alone, `SLOTS` lanes taking the runs in turn."""
    intervals: list[tuple[float, float]] = []

    async def lane(count: int) -> None:
        for _ in range(count):
            start = time.time()
            await asyncio.sleep(SLEEP)
            intervals.append((start, time.time()))

    async def lanes() -> None:
        await asyncio.gather(*(lane(runs // SLOTS + (index < runs % SLOTS)) for index in range(SLOTS)))

    asyncio.run(lanes())
    return intervals


def on_worker(backend: str, runs: int, limited: bool) -> list[tuple[float, float]]:
    """The runs through one in-process worker: 8 slots under a global limit of 4, or 4 slots and no limit."""
    intervals: list[tuple[float, float]] = []
    with fresh_database(backend) as url:
        app = tidegate.App(url)
        app.queue("w2", concurrency=tidegate.Concurrency(global_limit=SLOTS) if limited else None)

        @app.task(queue="w2", name="handoff_floor.sleep")
        async def sleep(i: int) -> None:
            start = time.time()
            await asyncio.sleep(SLEEP)
            intervals.append((start, time.time()))

        sleep.submit_many([{"i": i} for i in range(runs)])
        app.worker(queues=["w2"], max_workers=2 * SLOTS if limited else SLOTS, drain=True).run()
        app.close()
    if len(intervals) != runs:
        raise SystemExit(f"{backend}: {len(intervals)} of {runs} runs recorded")
    return intervals


def measure(backend: str, runs: int, way: str) -> tuple[float, int]:
    """(ideal / actual, most runs at once) for one way on one backend."""
    intervals = on_asyncio(runs) if way == "asyncio" else on_worker(backend, runs, way == "limited")
    span = max(end for _, end in intervals) - min(start for start, _ in intervals)
    return runs * SLEEP / SLOTS / span, max_overlap(intervals)


def main() -> None:
    options = parse_options(__doc__, runs=400)
    rows: list[list[str]] = []
    for backend in options.backends.split(","):
        samples: dict[str, list[tuple[float, int]]] = {way: [] for way in WAYS}
        for rep in range(options.repeat):
            load = os.getloadavg()[0]
            for way in WAYS:
                samples[way].append(measure(backend, options.runs, way))
            said = ", ".join(f"{way} {samples[way][-1][0]:.3f}" for way in WAYS)
            console.print(f"[dim]{backend} rep {rep + 1}: {said} (load {load:.1f})[/]")
        rows.append(
            [backend]
            + [f"{median([ratio for ratio, _ in samples[way]]):.3f}" for way in WAYS]
            + [str(max(most for way in ("free", "limited") for _, most in samples[way]))]
        )
    header = ["backend", "asyncio alone", "free: 4 slots, no limit", "limited: limit 4, 8 slots", "most at once"]
    print_table(console, f"W2 ideal/actual, medians of {options.repeat}", header, rows)
    command = "python benchmarks/handoff_floor.py " + " ".join(sys.argv[1:])
    notes = [
        measured_with(command.strip()),
        "",
        "ideal/actual of W2 (first start to last end), medians of the reps; the ways interleaved within each rep.",
    ]
    path = write_markdown("handoff_floor", "The floor under W2's ideal/actual", header, rows, notes)
    console.print(f"written to {path}")


if __name__ == "__main__":
    main()
