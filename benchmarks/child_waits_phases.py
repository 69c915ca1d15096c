"""Where the parents' time goes in `child_waits.py`: each attempt's claim-to-start and start-to-end.

    python benchmarks/child_waits_phases.py [--runs 200] [--backends postgres]

One drain of the benchmark's parents and one of its children alone (as
child_waits.py runs them), then, per kind of attempt (a child; a parent's
first attempt, which ends waiting; its resumed attempt), how many there were,
the slot-seconds they held (claim to their end) and the median and p90 of
claim to start and start to end, from the events the database recorded.
Attempts per second (all attempts over the makespan) compares the two drains:
when it is about the same, the extra time is the extra attempts.
A quick profile on a loaded machine: read it next to child_waits.md.
"""

from __future__ import annotations

import statistics
from collections import defaultdict

from child_waits import _drain, _events, _submit
from child_waits_app import CHILDREN
from common import fresh_database, parse_options

Event = tuple[str, str, str, float, str | None]


def phases(events: list[Event], label: str) -> None:
    claimed: dict[str, float] = {}
    started: dict[str, float] = {}
    attempt: dict[str, int] = defaultdict(int)
    spans: dict[tuple[str, int], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for run_id, task, kind, at, _ in events:
        if kind == "RunDequeued":
            attempt[run_id] += 1
            claimed[run_id] = at
            started.pop(run_id, None)
        elif kind == "RunStarted":
            started[run_id] = at
        elif kind in ("RunWaiting", "RunCompleted"):
            begun = started.get(run_id, claimed[run_id])  # a wait may end an attempt before its start is reported
            span = spans[(task, attempt[run_id])]
            span["claim->start"].append(begun - claimed[run_id])
            span["start->end"].append(at - begun)
            span["slot"].append(at - claimed[run_id])
    for (task, number), span in sorted(spans.items()):
        parts = [f"{label} {task} attempt {number}: n={len(span['slot'])} slot-seconds={sum(span['slot']):.2f}"]
        for name, values in span.items():
            values.sort()
            p90 = values[int(0.9 * len(values))]
            parts.append(f"{name} median {1000 * statistics.median(values):.1f} ms p90 {1000 * p90:.1f} ms")
        print(" | ".join(parts))
    first = min(at for _, _, kind, at, _ in events if kind == "RunDequeued")
    last = max(at for _, _, kind, at, _ in events if kind == "RunCompleted")
    attempts = sum(1 for _, _, kind, _, _ in events if kind == "RunDequeued")
    print(f"{label}: makespan {last - first:.2f} s, {attempts} attempts, {attempts / (last - first):.0f} attempts/s")


def main() -> None:
    options = parse_options(__doc__, runs=200)
    for backend in options.backends.split(","):
        with fresh_database(backend) as url:
            _submit(url, "bench.parent", [{"n": n} for n in range(options.runs)])
            _drain(url)
            phases(_events(url), f"{backend} parents")
        with fresh_database(backend) as url:
            _submit(url, "bench.child", [{"n": n} for n in range(options.runs * CHILDREN)])
            _drain(url)
            phases(_events(url), f"{backend} children alone")


if __name__ == "__main__":
    main()
