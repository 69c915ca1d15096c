"""Where a slot of max_concurrent_runs sits idle in `child_waits.py`'s drains (2 worker processes).

    python benchmarks/slot_idle_procs.py [--runs 200] [--repeat 1] [--backends postgres]

Runs child_waits' two drains (its 1,000 children alone, then its 200 parents with
their children) with each worker process instrumented as `slot_idle.py` instruments
its one worker (turns, store cycles, the loop's apply), plus each sync body's start
and end. The traces of both processes are then put on one time line, and every
claimed attempt is paired with the slot it took: the earliest body end, in either
process, that no earlier claim took (the cap is one pool of 10 slots). A parent's
first attempt frees its slot when its trigger commits, shortly before its body ends:
its body end stands for it. Each pairing's idle time is split into:

- end -> its outcome sent: the ended run's outcome waits for the turn that takes it
  (a cycle of its process already in flight, or the loop's wake);
- sent -> release committed: that cycle;
- release -> claiming cycle sent: zero when the same cycle claimed; else the
  claimer's wake-up (a NOTIFY to the other process), or its own cycle in flight;
- claiming cycle: from its start (or the release, if later) to its return;
- returned -> body starts: the loop applies it, a task thread starts the body.

Printed per drain: medians, p90 and sums (over the cap: the makespan they cost) of
each part, split by whether the claim was made by the process that freed the slot.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import threading
import time
from collections import defaultdict
from itertools import pairwise
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))

from child_waits import _submit  # noqa: E402
from child_waits_app import CAP, CHILDREN  # noqa: E402
from common import fresh_database, parse_options  # noqa: E402
from slot_idle import Cycle, instrument  # noqa: E402

PROCESSES = 2
MAX_WORKERS = 10
PARTS = (
    "end -> outcome sent",
    "sent -> release committed",
    "release -> claiming cycle sent",
    "claiming cycle",
    "returned -> body starts",
    "total",
)


def serve(queues: str, out: str) -> None:
    """In a worker process: drain with the instruments on, then write the trace to `out`."""
    import child_waits_app

    worker = child_waits_app.app.worker(queues=queues.split(","), max_workers=MAX_WORKERS, drain=True)
    cycles: list[Cycle] = []
    buffered: dict[str, float] = {}
    bodies: dict[str, list[float]] = {}
    instrument(worker, cycles, buffered)
    dispatcher = worker._dispatcher
    run_sync, local = dispatcher._run_sync, threading.local()

    def timed_run(attempt: Any, task: Any) -> None:
        key = f"{attempt.run.id}/{attempt.run.attempt}"
        function = task.fn

        def body(**kwargs: Any) -> Any:
            began = time.time()
            try:
                return function(**kwargs)
            finally:
                bodies[key] = [began, time.time()]

        local.key = key
        run_sync(attempt, type(task)(task.name, body, task.context_param, task.workflow))

    dispatcher._run_sync = timed_run  # type: ignore[method-assign]
    worker.run()
    trace = {
        "cycles": [
            [c.taken, c.store_start, c.store_end, c.applied, c.outcomes, c.claimed, c.starts, c.kind] for c in cycles
        ],
        "bodies": bodies,
    }
    Path(out).write_text(json.dumps(trace))


def drain(url: str, queues: str, folder: Path) -> list[dict[str, Any]]:
    env = {**os.environ, "TIDEGATE_DATABASE": url}
    outs = [folder / f"trace{index}.json" for index in range(PROCESSES)]
    command = [sys.executable, __file__, "--serve"]
    workers = [subprocess.Popen([*command, queues, str(out)], env=env) for out in outs]
    for worker in workers:
        if worker.wait(timeout=900) != 0:
            raise SystemExit(f"a worker process exited with {worker.returncode}")
    return [json.loads(out.read_text()) for out in outs]


def attribute(traces: list[dict[str, Any]]) -> dict[str, dict[str, list[float]]]:
    """Pair each claimed attempt with the slot it took and split the idle time (see the docstring)."""
    ends: list[tuple[float, int, str]] = []  # (body end, process, run id)
    sent_in: dict[str, tuple[float, float]] = {}  # run id -> (taken, store_end) of the cycle that reported it
    claims: list[tuple[float, float, float, int, str]] = []  # (store_start, store_end, body start, process, run)
    for process, trace in enumerate(traces):
        starts_of = dict(trace["bodies"])
        for key, (_, end) in starts_of.items():
            ends.append((end, process, key.split("/")[0]))
        for taken, store_start, store_end, _applied, outcomes, claimed, _starts, _kind in trace["cycles"]:
            for run in outcomes:
                sent_in[run] = (taken, store_end)
            for run in claimed:
                matches = [k for k in starts_of if k.startswith(run + "/")]
                began = min((starts_of[k][0] for k in matches if starts_of[k][0] >= store_end), default=None)
                if began is not None:
                    claims.append((store_start, store_end, began, process, run))
    ends.sort()
    claims.sort(key=lambda claim: claim[1])
    parts: dict[str, dict[str, list[float]]] = {"same process": defaultdict(list), "other process": defaultdict(list)}
    taken_slots = 0
    for store_start, store_end, began, process, _run in claims[CAP:]:
        if taken_slots >= len(ends) or ends[taken_slots][0] > store_end:
            continue  # claimed into a slot free since the start (or a parent's early release)
        end, freer, freed_run = ends[taken_slots]
        taken_slots += 1
        taken, committed = sent_in.get(freed_run, (end, end))  # a parent ended waiting: freed by its trigger
        cycle_from = max(store_start, committed)
        chain = (end, max(end, taken), max(taken, committed), cycle_from, store_end, began)
        kind = "same process" if freer == process else "other process"
        for part, (a, b) in zip(PARTS, pairwise(chain), strict=False):
            parts[kind][part].append(max(0.0, b - a))
        parts[kind]["total"].append(began - end)
    return parts


def cycle_kinds(traces: list[dict[str, Any]]) -> str:
    """Cycles of both processes by what they carried: count and median wall time."""
    kinds: dict[str, list[float]] = defaultdict(list)
    for trace in traces:
        for _taken, store_start, store_end, _applied, _outcomes, _claimed, _starts, kind in trace["cycles"]:
            kinds[kind].append(store_end - store_start)
    waited: dict[str, int] = defaultdict(int)
    for trace in traces:
        flights = sorted((c[1], c[2], c[7]) for c in trace["cycles"])
        for _, end in trace["bodies"].values():
            kind = next((k for start, stop, k in flights if start <= end < stop), "none")
            waited[kind.split(":")[0] + (": look closed" if "closed" in kind else "")] += 1
    spans = [span for trace in traces for span in trace["bodies"].values()]
    makespan = max(end for _, end in spans) - min(start for start, _ in spans)
    listed = "; ".join(
        f"{kind}: {len(walls)} x {1000 * statistics.median(walls):.2f} ms" for kind, walls in sorted(kinds.items())
    )
    busy = "; ".join(f"{kind}: {count}" for kind, count in sorted(waited.items()))
    return (
        f"bodies' makespan {makespan:.2f} s; cycles: {listed}\n"
        f"  a body ended while its process's cycle was in flight, by what that cycle carried: {busy}"
    )


def show(label: str, parts: dict[str, dict[str, list[float]]]) -> None:
    for kind, split in parts.items():
        if not split["total"]:
            continue
        print(f"{label}, claimed by the {kind}: {len(split['total'])} hand-offs")
        for part in PARTS:
            values = sorted(split[part])
            p90 = values[int(0.9 * len(values))]
            print(
                f"  {part}: median {1000 * statistics.median(values):.2f} ms, p90 {1000 * p90:.2f} ms,"
                f" sum/cap {sum(values) / CAP:.3f} s"
            )


def main() -> None:
    if sys.argv[1:2] == ["--serve"]:
        serve(sys.argv[2], sys.argv[3])
        return
    import tempfile

    options = parse_options(__doc__, runs=200)
    for backend in options.backends.split(","):
        for _ in range(options.repeat):
            with tempfile.TemporaryDirectory() as folder:
                with fresh_database(backend) as url:
                    _submit(url, "bench.child", [{"n": n} for n in range(options.runs * CHILDREN)])
                    traces = drain(url, "parents,children", Path(folder))
                    print(f"{backend} children alone: {cycle_kinds(traces)}")
                    show(f"{backend} children alone", attribute(traces))
                with fresh_database(backend) as url:
                    _submit(url, "bench.parent", [{"n": n} for n in range(options.runs)])
                    traces = drain(url, "parents,children", Path(folder))
                    print(f"{backend} parents: {cycle_kinds(traces)}")
                    show(f"{backend} parents", attribute(traces))


if __name__ == "__main__":
    main()
