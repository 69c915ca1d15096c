"""Where a limited slot sits idle between one run's end and the next run's start (issue 16's W2).

    python benchmarks/slot_idle.py [--runs 400] [--repeat 3] [--backends postgres]

The W2 workload of `../shared/bench-peers/` run in this process: --runs async runs of
`await asyncio.sleep(0.05)` on a queue with a global limit of 4, one worker with
max_workers=8. The worker is instrumented where a freed slot travels: the run's body ends
(its own timestamp), its outcome is buffered (`Reports.ended`), a turn takes it
(`Reports.take`), the store's thread starts the cycle (`Worker._cycle`), the cycle returns,
the loop applies the result (`Worker._apply`), and the claimed run's body starts. The
database adds the claim statement's time (RunDequeued). Each claimed run is paired with
the earliest ended run whose outcome its cycle carried and that no earlier claim of the same
cycle took.

Printed, per part of that chain, the median and p90 over the hand-offs, and the sum over
all hand-offs divided by the limit (the makespan it costs); also the idle slot-time in all
(limit x makespan minus the bodies' time), the cycles by kind (what they carried), and how
often the ended run's outcome waited for a cycle already in flight, and of which kind.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from rich.console import Console

import tidegate
from common import fresh_database, parse_options
from limits_apps import event_times

LIMIT = 4
SLEEP = 0.05
console = Console()


@dataclass
class Cycle:
    taken: float
    starts: int
    outcomes: list[str]
    claim: int
    store_start: float = 0.0
    store_end: float = 0.0
    applied: float = 0.0
    claimed: list[str] = field(default_factory=list)
    cpu: float = 0.0  # the store thread's CPU time in the cycle
    calls: list[str] = field(default_factory=list)  # the store verbs the cycle made: peek, claim n, report

    @property
    def kind(self) -> str:
        said = ("outcomes" if self.outcomes else "") + ("+starts" if self.starts else "")
        return (said.strip("+") or "nothing") + ": " + " + ".join(self.calls)


def instrument(worker: Any, cycles: list[Cycle], buffered: dict[str, float]) -> None:
    """Record when each step of a freed slot's path happens on `worker` (before it starts)."""
    reports, dispatcher = worker._reports, worker._dispatcher
    take, ended, cycle, apply = reports.take, reports.ended, worker._cycle, worker._apply
    current: list[Cycle] = []

    def taken() -> Any:
        starts, outcomes = take()
        free = worker.settings.max_workers - dispatcher.in_flight
        record = Cycle(time.time(), len(starts), [o.run_id for o in outcomes], free)
        current[:] = [record]
        return starts, outcomes

    def noted(outcome: Any) -> None:
        buffered[outcome.run_id] = time.time()
        ended(outcome)

    def cycled(starts: Any, outcomes: Any, claim: int) -> Any:
        record = current[0]
        record.claim = claim
        record.store_start = time.time()
        cpu = time.thread_time()
        try:
            return cycle(starts, outcomes, claim)
        finally:
            record.store_end = time.time()
            record.cpu = time.thread_time() - cpu

    def applied(result: Any, sent: float) -> None:
        record = current[0]
        record.applied = time.time()
        record.claimed = [run.id for run in result.claimed]
        cycles.append(record)
        apply(result, sent)

    reports.take, reports.ended, worker._cycle, worker._apply = taken, noted, cycled, applied
    store = worker._store
    peek_cycle, store_cycle = store.peek_cycle, store.cycle

    def peeked(*args: Any) -> Any:
        answer = peek_cycle(*args)
        current[0].calls.append("look" if answer is None else "look (closed)")
        return answer

    def stored(request: Any) -> Any:
        if current:
            current[0].calls.append(f"claim {request.claim_limit}" if request.claim_limit else "report")
        return store_cycle(request)

    store.peek_cycle, store.cycle = peeked, stored


def build(url: str, bodies: dict[str, tuple[float, float]]) -> tuple[tidegate.App, Any]:
    app = tidegate.App(database=url)
    app.queue("bench", concurrency=tidegate.Concurrency(global_limit=LIMIT))

    @app.task(name="bench.job", queue="bench")
    async def job_body(ctx: tidegate.Context, i: int) -> None:
        began = time.time()
        await asyncio.sleep(SLEEP)
        bodies[ctx.run_id] = (began, time.time())

    return app, job_body


PARTS = (
    "body end -> outcome buffered",
    "buffered -> taken by a turn",
    "taken -> store thread",
    "store thread -> claim statement",
    "claim statement -> cycle returned",
    "returned -> loop applies",
    "applied -> next body starts",
    "total",
)


def one_run(backend: str, runs: int) -> dict[str, Any]:
    bodies: dict[str, tuple[float, float]] = {}
    buffered: dict[str, float] = {}
    cycles: list[Cycle] = []
    with fresh_database(backend) as url:
        app, job = build(url, bodies)
        job.submit_many([{"i": i} for i in range(runs)])
        worker = app.worker(queues=["bench"], max_workers=8)
        instrument(worker, cycles, buffered)
        worker.start()
        deadline = time.time() + 300
        while len(bodies) < runs and time.time() < deadline:
            time.sleep(0.005)
        worker.stop()
        dequeued = {run: at for run, _, at, _ in event_times(url, "bench", ("RunDequeued",))}
        app.close()
    span = max(end for _, end in bodies.values()) - min(start for start, _ in bodies.values())
    busy = sum(end - start for start, end in bodies.values())
    parts: dict[str, list[float]] = defaultdict(list)
    waited_on: Counter[str] = Counter()
    in_flight = sorted((c.store_start, c.applied, c.kind) for c in cycles)
    for record in cycles:
        ended = sorted(record.outcomes, key=lambda run: bodies[run][1])
        for freed, new in zip(ended, sorted(record.claimed, key=lambda run: bodies[run][0]), strict=False):
            end, start = bodies[freed][1], bodies[new][0]
            chain = (
                end,
                buffered[freed],
                record.taken,
                record.store_start,
                dequeued[new],
                record.store_end,
                record.applied,
                start,
            )
            for part, (a, b) in zip(PARTS, pairwise(chain), strict=False):
                parts[part].append(b - a)
            parts["total"].append(start - end)
            busy_with = [kind for s, e, kind in in_flight if s <= buffered[freed] < e]
            waited_on[busy_with[0] if busy_with else "none (loop was waiting)"] += 1
    return {
        "span": span,
        "idle": LIMIT * span - busy,
        "parts": parts,
        "cycles": Counter(c.kind for c in cycles),
        "waited_on": waited_on,
        "cycle_ms": {
            kind: (
                1000 * statistics.median(c.store_end - c.store_start for c in cycles if c.kind == kind),
                1000 * statistics.median(c.cpu for c in cycles if c.kind == kind),
            )
            for kind in {c.kind for c in cycles}
        },
    }


def report(backend: str, runs: int, samples: list[dict[str, Any]]) -> None:
    console.print(
        f"[bold]{backend}[/]: makespan median {statistics.median(s['span'] for s in samples):.3f} s "
        f"(ideal {SLEEP * runs / LIMIT:.2f} s), idle slot-seconds median "
        f"{statistics.median(s['idle'] for s in samples):.3f}"
    )
    for part in PARTS:
        p50 = statistics.median(statistics.median(s["parts"][part]) for s in samples) * 1000
        p90 = statistics.median(sorted(s["parts"][part])[int(0.9 * len(s["parts"][part]))] for s in samples) * 1000
        cost = statistics.median(sum(s["parts"][part]) / LIMIT for s in samples)
        console.print(f"  {part}: p50 {p50:.2f} ms, p90 {p90:.2f} ms, sum/limit {cost:.3f} s")
    handoffs = statistics.median(len(s["parts"]["total"]) for s in samples)
    console.print(f"  hand-offs traced (median): {handoffs}")
    for s in samples:
        console.print(
            "  store cycle wall / store-thread CPU, ms (median by kind): "
            + "; ".join(f"{kind}: {wall:.2f} / {cpu:.2f}" for kind, (wall, cpu) in sorted(s["cycle_ms"].items()))
        )
    for name in ("cycles", "waited_on"):
        merged: Counter[str] = Counter()
        for s in samples:
            merged.update(s[name])
        console.print(f"  {name} (all reps): " + "; ".join(f"{k}: {v}" for k, v in merged.most_common()))


def main() -> None:
    options = parse_options(__doc__, runs=400)
    for backend in options.backends.split(","):
        report(backend, options.runs, [one_run(backend, options.runs) for _ in range(options.repeat)])


if __name__ == "__main__":
    main()
