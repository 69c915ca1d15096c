"""Makespan under a queue limit: 400 runs of 50 ms behind `global_limit=4`.

    python benchmarks/limited_makespan.py [--runs 400] [--repeat 3] [--backends sqlite,postgres]

Two worker processes (max_workers=8 each) drain a queue declared with
`Concurrency(global_limit=4)`. Reported, per backend, the median over
--repeat fresh databases of:
- the makespan: first claim (RunDequeued) to last completion (RunCompleted),
  as the database recorded them (process start-up is not counted);
- ideal / actual, where ideal = runs x 50 ms / 4 (5.0 s for 400 runs);
- the maximum concurrency (the worst over the repeats, not the median), from
  the runs' slot intervals [claim, completion) in the database, and from
  the execution intervals each task measured itself; both must be <= 4;
- the baseline, measured in the same run: the same runs in a queue without a
  limit, drained by one worker process with max_workers=4, so the cap is the
  worker's own thread count and no gate is consulted; and the ratio.
"""

from __future__ import annotations

import json

from rich.console import Console

from common import (
    fresh_database,
    max_overlap,
    measured_with,
    medians,
    parse_options,
    print_table,
    repeated,
    write_markdown,
)
from limits_apps import MAKESPAN_LIMIT, MAKESPAN_SLEEP, build, event_times, query, start_worker, stop_worker

PROCESSES = 2
MAX_WORKERS = 8
console = Console()


def drain(url: str, scenario: str, runs: int, processes: int, max_workers: int) -> dict[str, float]:
    app = build(scenario, url)
    app.tasks["sleep50"].submit_many([{}] * runs)
    app.close()
    workers = [start_worker(url, scenario, ["limited"], max_workers, drain=True) for _ in range(processes)]
    try:
        for worker in workers:
            if worker.wait(timeout=600) != 0:
                raise SystemExit(f"a worker process exited with {worker.returncode}")
    finally:
        for worker in workers:
            stop_worker(worker)
    claims: dict[str, float] = {}
    completions: dict[str, float] = {}
    for run_id, kind, at, _ in event_times(url, "limited", ("RunDequeued", "RunCompleted")):
        (claims if kind == "RunDequeued" else completions)[run_id] = at
    if len(completions) != runs or len(claims) != runs:
        raise SystemExit(f"expected {runs} claimed and completed runs, found {len(claims)} and {len(completions)}")
    results = query(
        url,
        "SELECT result FROM tidegate_runs WHERE queue = 'limited'",
        "SELECT result FROM tidegate_runs WHERE queue = 'limited'",
    )
    executions = [tuple(json.loads(r) if isinstance(r, str) else r) for (r,) in results]
    makespan = max(completions.values()) - min(claims.values())
    return {
        "makespan": makespan,
        "slot_concurrency": max_overlap([(claims[run], completions[run]) for run in claims]),
        "exec_concurrency": max_overlap(executions),
        "per_run": makespan * MAKESPAN_LIMIT / runs,
    }


def measure(backend: str, runs: int) -> dict[str, float]:
    with fresh_database(backend) as url:
        gated = drain(url, "makespan", runs, PROCESSES, MAX_WORKERS)
    with fresh_database(backend) as url:
        local = drain(url, "makespan_local", runs, 1, MAKESPAN_LIMIT)
    return {
        **gated,
        "baseline": local["makespan"],
        "baseline_concurrency": local["exec_concurrency"],
    }


def main() -> None:
    options = parse_options(__doc__, runs=400)
    ideal = options.runs * MAKESPAN_SLEEP / MAKESPAN_LIMIT
    results: dict[str, dict[str, float]] = {}
    for backend, samples in repeated(
        options.backends, options.repeat, lambda b: measure(b, options.runs), console
    ).items():
        figures = medians(samples)
        for key in ("slot_concurrency", "exec_concurrency", "baseline_concurrency"):
            figures[key] = max(sample[key] for sample in samples)
        results[backend] = figures
    header = [
        "backend",
        "makespan",
        "ideal / actual",
        "overhead per run and slot",
        "max concurrency (slots, DB)",
        "max concurrency (execution)",
        "baseline: no gate, 1 process x 4 threads",
        "gated / baseline",
    ]
    rows = [
        [
            backend,
            f"{f['makespan']:.2f} s",
            f"{ideal / f['makespan']:.3f}",
            f"{(f['per_run'] - MAKESPAN_SLEEP) * 1000:.1f} ms",
            f"{f['slot_concurrency']:.0f}",
            f"{f['exec_concurrency']:.0f}",
            f"{f['baseline']:.2f} s",
            f"{f['makespan'] / f['baseline']:.3f}x",
        ]
        for backend, f in results.items()
    ]
    title = (
        f"Makespan, {options.runs} runs of {MAKESPAN_SLEEP * 1000:.0f} ms behind global_limit={MAKESPAN_LIMIT}, "
        f"{PROCESSES} worker processes, median of {options.repeat}"
    )
    print_table(console, title, header, rows)
    path = write_markdown(
        "limited_makespan",
        title,
        header,
        rows,
        [
            measured_with("python benchmarks/limited_makespan.py"),
            f"Ideal makespan: {options.runs} x {MAKESPAN_SLEEP * 1000:.0f} ms / {MAKESPAN_LIMIT} = {ideal:.2f} s; "
            "the target is ideal / actual >= 0.97.",
            "Makespan runs from the first claim (RunDequeued) to the last completion (RunCompleted) as the database "
            "recorded them. Overhead per run and slot = makespan x limit / runs - 50 ms.",
            "Max concurrency is the worst over the repeats: slots from the [claim, completion) intervals in the "
            "database, execution from the [start, end) each task measured; both must be <= the limit. Events are "
            "stamped with the time their transaction began (before any lock wait), so slot intervals could show a "
            "spurious overlap of up to one lock wait; the execution intervals cannot.",
            f"Worker processes run max_workers={MAX_WORKERS}, so only the gate keeps them at {MAKESPAN_LIMIT}. "
            "The baseline drains the same runs from a queue without a limit with one process of max_workers=4.",
        ],
    )
    console.print(f"written to {path}")


if __name__ == "__main__":
    main()
