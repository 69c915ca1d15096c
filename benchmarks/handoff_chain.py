"""Where a cross-worker hand-off at limit 1 spends its time (lever 4: measure before changing).

    python benchmarks/handoff_chain.py [--runs 200] [--repeat 3]

PostgreSQL ping-pong (`limits_apps.pingpong_app`: every run queues the next
on the other queue) with two workers in this process, one per queue, each
with its own app and store. Each worker is instrumented where the wake-up
travels: its listener's callback (`_on_notification`, listener thread), the
wake on its event loop (`LoopBridge.wake`), and the start of its store call
(`Worker._cycle`, store thread). For each hand-off, from the finished run's
RunCompleted (the stamp of the finisher's cycle transaction: its start) to
the next run's RunDequeued (the claim statement's time):

- finisher's cycle, commit, NOTIFY: to the other worker's listener callback;
- listener to loop; loop to store thread;
- look and claim: from the store call's start to the claim statement.

In one process the two workers share the GIL, so read the shares, not the
totals, against `handoff.py`'s two-process ping-pong. Medians (and p90) of
each part over --repeat runs of --runs hand-offs.
"""

from __future__ import annotations

import argparse
import bisect
import statistics
import time
from itertools import pairwise
from typing import Any

from rich.console import Console

from common import fresh_database, median
from handoff import wait_completed
from limits_apps import build, event_times

QUEUES = ("ping", "pong")
PARTS = ("finisher's cycle, commit, NOTIFY", "listener to loop", "loop to store thread", "look and claim", "total")
console = Console()


def instrument(worker: Any, marks: dict[str, list[float]]) -> None:
    """Record when a wake-up reaches each thread of `worker` (before it starts)."""
    note, wake, cycle = worker._on_notification, worker._bridge.wake, worker._cycle

    def noted() -> None:
        marks["listener"].append(time.time())
        note()

    def woken() -> None:
        marks["loop"].append(time.time())
        wake()

    def cycled(*args: Any) -> Any:
        marks["store"].append(time.time())
        return cycle(*args)

    worker._on_notification, worker._bridge.wake, worker._cycle = noted, woken, cycled


def first_after(times: list[float], moment: float) -> float | None:
    index = bisect.bisect_left(times, moment)
    return times[index] if index < len(times) else None


def one_run(runs: int) -> dict[str, list[float]]:
    marks: dict[str, dict[str, list[float]]] = {queue: {"listener": [], "loop": [], "store": []} for queue in QUEUES}
    events: dict[str, dict[str, tuple[float, str]]] = {}
    with fresh_database("postgres") as url:
        apps = [build("pingpong", url) for _ in QUEUES]
        workers = []
        for app, queue in zip(apps, QUEUES, strict=True):
            worker = app.worker(queues=[queue], max_workers=8)
            instrument(worker, marks[queue])
            workers.append(worker.start())
        apps[0].tasks["bounce"].submit(n=0, total=runs)
        wait_completed(url, list(QUEUES), runs, timeout=300)
        for worker in workers:
            worker.stop()
        for queue in QUEUES:
            for run_id, kind, at, _ in event_times(url, queue, ("RunDequeued", "RunCompleted")):
                events.setdefault(run_id, {})[kind] = (at, queue)
        for app in apps:
            app.close()
    order = sorted(events, key=lambda run_id: events[run_id]["RunDequeued"][0])
    parts: dict[str, list[float]] = {part: [] for part in PARTS}
    for finished, following in pairwise(order):
        ended = events[finished]["RunCompleted"][0]
        dequeued, queue = events[following]["RunDequeued"]
        heard = first_after(marks[queue]["listener"], ended)
        woke = heard and first_after(marks[queue]["loop"], heard)
        called = woke and first_after(marks[queue]["store"], woke)
        if not (heard and woke and called) or called > dequeued:
            continue  # claimed on another path (its poll, a turn already running): not this chain
        for part, value in zip(
            PARTS, (heard - ended, woke - heard, called - woke, dequeued - called, dequeued - ended), strict=True
        ):
            parts[part].append(value)
    return parts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=3)
    options = parser.parse_args()
    samples = [one_run(options.runs) for _ in range(options.repeat)]
    for part in PARTS:
        p50 = median([statistics.median(sample[part]) for sample in samples]) * 1000
        p90 = median([sorted(sample[part])[int(len(sample[part]) * 0.9)] for sample in samples]) * 1000
        counted = min(len(sample[part]) for sample in samples)
        console.print(f"{part}: p50 {p50:.3f} ms, p90 {p90:.3f} ms ({counted}+ hand-offs a run)")


if __name__ == "__main__":
    main()
