"""Child waits: 200 parents each batch-waiting on 5 children of 20 ms, max_concurrent_runs=10.

    python benchmarks/child_waits.py [--runs 200] [--repeat 3] [--backends sqlite,postgres]

Two worker processes (max_workers=10 each) drain the parents and their children.
A waiting parent holds no worker and releases its global slot, so the children's
work should spread over the 10 slots. Reported, per backend, the median over
--repeat fresh databases of:
- the makespan: first claim (RunDequeued) to last completion (RunCompleted), as
  the database recorded them (process start-up is not counted);
- ideal / makespan, where ideal = runs x 5 x 20 ms / 10 (2.0 s for 200 parents);
- the baseline measured in the same run: the same 1000 children submitted on
  their own (no parents, no waits) and drained alike; baseline / makespan;
- the suspend/resume round trip: from the end of a parent's last child
  (its RunCompleted) to the parent's next claim (RunDequeued), median and p99.
The machine is shared and loaded: read the ratios, not the absolute times.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from common import fresh_database, measured_with, medians, parse_options, repeated, write_markdown
from limits_apps import query

HERE = Path(__file__).parent
PROCESSES = 2
MAX_WORKERS = 10
console = Console()


def _drain(url: str) -> None:
    env = {**os.environ, "TIDEGATE_DATABASE": url}
    command = [sys.executable, str(HERE / "child_waits_app.py"), "parents,children", str(MAX_WORKERS)]
    workers = [subprocess.Popen(command, env=env) for _ in range(PROCESSES)]
    for worker in workers:
        if worker.wait(timeout=900) != 0:
            raise SystemExit(f"a worker process exited with {worker.returncode}")


def _events(url: str) -> list[tuple[str, str, str, float, str | None]]:
    """(run id, task, event type, epoch seconds, parent id), in event order."""
    return query(
        url,
        "SELECT e.run_id, r.task, e.type, e.at, r.parent_id FROM tidegate_events e"
        " JOIN tidegate_runs r ON r.id = e.run_id ORDER BY e.id",
        "SELECT e.run_id, r.task, e.type, extract(epoch FROM e.at)::float8, r.parent_id FROM tidegate_events e"
        " JOIN tidegate_runs r ON r.id = e.run_id ORDER BY e.id",
    )


def _makespan(events: list[tuple[str, str, str, float, str | None]], expected: int) -> float:
    claims = [at for _, _, kind, at, _ in events if kind == "RunDequeued"]
    ends = [at for _, _, kind, at, _ in events if kind == "RunCompleted"]
    if len(ends) != expected:
        raise SystemExit(f"expected {expected} completed runs, found {len(ends)}")
    return max(ends) - min(claims)


def _round_trips(events: list[tuple[str, str, str, float, str | None]]) -> list[float]:
    """Per resumed parent: its last child's end to its next claim."""
    last_child_end: dict[str, float] = {}
    resumed: dict[str, float] = {}
    trips = []
    for run_id, _, kind, at, parent in events:
        if kind == "RunCompleted" and parent is not None:
            last_child_end[parent] = max(at, last_child_end.get(parent, 0.0))
        elif kind == "RunResumed":
            resumed[run_id] = last_child_end[run_id]
        elif kind == "RunDequeued" and run_id in resumed:
            trips.append(at - resumed.pop(run_id))
    return trips


def measure(backend: str, parents: int) -> dict[str, float]:
    sys.path.insert(0, str(HERE))
    from child_waits_app import CAP, CHILD_SECONDS, CHILDREN

    ideal = parents * CHILDREN * CHILD_SECONDS / CAP
    with fresh_database(backend) as url:
        _submit(url, "bench.parent", [{"n": n} for n in range(parents)])
        _drain(url)
        events = _events(url)
        makespan = _makespan(events, parents * (CHILDREN + 1))
        trips = sorted(_round_trips(events))
    with fresh_database(backend) as url:
        _submit(url, "bench.child", [{"n": n} for n in range(parents * CHILDREN)])
        _drain(url)
        baseline = _makespan(_events(url), parents * CHILDREN)
    return {
        "makespan": makespan,
        "ideal_ratio": ideal / makespan,
        "baseline": baseline,
        "baseline_ratio": baseline / makespan,
        "trip_median_ms": 1000 * statistics.median(trips),
        "trip_p99_ms": 1000 * trips[min(len(trips) - 1, int(0.99 * len(trips)))],
    }


def _submit(url: str, task: str, many: list[dict[str, int]]) -> None:
    """Submit in a process of its own: the benchmark's app reads its database from the environment."""
    env = {**os.environ, "TIDEGATE_DATABASE": url}
    code = (
        "import json, sys; sys.path.insert(0, sys.argv[1]); import child_waits_app as m; "
        "m.app.tasks[sys.argv[2]].submit_many(json.loads(sys.argv[3])); m.app.close()"
    )
    subprocess.run([sys.executable, "-c", code, str(HERE), task, json.dumps(many)], env=env, check=True)


def main() -> None:
    options = parse_options(__doc__, runs=200)
    samples = repeated(options.backends, options.repeat, lambda backend: measure(backend, options.runs), console)
    header = ["backend", "makespan", "ideal / makespan", "baseline", "baseline / makespan", "round trip median", "p99"]
    table = Table(*header)
    rows = []
    for backend, runs in samples.items():
        m = medians(runs)
        row = [
            backend,
            f"{m['makespan']:.2f} s",
            f"{m['ideal_ratio']:.2f}",
            f"{m['baseline']:.2f} s",
            f"{m['baseline_ratio']:.2f}",
            f"{m['trip_median_ms']:.1f} ms",
            f"{m['trip_p99_ms']:.1f} ms",
        ]
        table.add_row(*row)
        rows.append(row)
    console.print(table)
    notes = [
        measured_with(f"python benchmarks/child_waits.py --runs {options.runs} --repeat {options.repeat}"),
        f"{options.runs} parents x 5 children of 20 ms, max_concurrent_runs=10, {PROCESSES} worker processes"
        f" x max_workers={MAX_WORKERS}; medians of {options.repeat} fresh databases; a shared, loaded machine.",
        "Round trip 0 ms: the worker that reports a parent's last child claims the resumed parent in the"
        " same transaction (one store time per transaction), so no wake-up or poll lies between them.",
    ]
    path = write_markdown("child_waits", "Child waits: makespan and round trip", header, rows, notes)
    console.print(f"written {path}")


if __name__ == "__main__":
    main()
