"""A workflow's sliding window of children: 40 children of 50 ms through `wf.map_children(concurrency=4)`.

    python benchmarks/child_window.py [--repeat 3] [--backends sqlite,postgres]

One workflow run of `wf.map_children(item, range(40), concurrency=4)`, each
child sleeping 50 ms, executed by one in-process worker with 6 slots (the
window, not the worker, is the limit). The window slides: every child that
ends queues the workflow again (a wait on any child), whose next attempt
triggers the next item, so each child pays one suspend/resume round trip.

The baseline, measured in the same run: the same 40 children triggered at
once (`concurrency=None`) by the same workflow, on a worker with 4 slots, so
the worker's capacity keeps 4 running with no resume between them. Reported,
per backend, the median over --repeat fresh databases of the makespan (first
child start to last child end, `time.monotonic()`), ideal / actual (ideal =
40 x 50 ms / 4 = 0.5 s), baseline / actual, and the most children executing
at once (the worst over the repeats), which must be <= 4.
"""

from __future__ import annotations

import threading
import time

from rich.console import Console

import tidegate
from common import fresh_database, max_overlap, measured_with, medians, parse_options, repeated, write_markdown
from tidegate import Executor, StepRef, Workflow

ITEMS = 40
WINDOW = 4
SLEEP = 0.05
console = Console()


def measure_once(url: str, window: int | None, slots: int) -> tuple[float, int]:
    spans: list[tuple[float, float]] = []
    lock = threading.Lock()
    with tidegate.App(url) as app:

        @app.task(name="bench.item", queue="items")
        def item(n: int) -> int:
            start = time.monotonic()
            time.sleep(SLEEP)
            with lock:
                spans.append((start, time.monotonic()))
            return n

        @app.workflow(name="bench.window", queue="flows", executor=Executor.in_process())
        def flow(wf: Workflow, count: int, concurrency: int | None) -> StepRef:
            return wf.map_children(item, list(range(count)), concurrency=concurrency)

        handle = flow.submit(count=ITEMS, concurrency=window)
        worker = app.worker(max_workers=slots, queues=["flows", "items"]).start()
        try:
            assert handle.wait(timeout=300) == list(range(ITEMS))
        finally:
            worker.stop()
    return max(end for _, end in spans) - min(start for start, _ in spans), max_overlap(spans)


def measure(backend: str) -> dict[str, float]:
    with fresh_database(backend) as url:
        baseline, _ = measure_once(url, None, WINDOW)
    with fresh_database(backend) as url:
        makespan, peak = measure_once(url, WINDOW, WINDOW + 2)
    ideal = ITEMS * SLEEP / WINDOW
    return {
        "makespan": makespan,
        "ideal/actual": ideal / makespan,
        "baseline/actual": baseline / makespan,
        "baseline": baseline,
        "peak": float(peak),
    }


def main() -> None:
    options = parse_options(__doc__, None)
    samples = repeated(options.backends, options.repeat, measure, console)
    rows = []
    for backend, runs in samples.items():
        figures = medians(runs)
        peak = max(run["peak"] for run in runs)
        rows.append(
            [
                backend,
                f"{figures['makespan']:.3f} s",
                f"{figures['ideal/actual']:.2f}",
                f"{figures['baseline']:.3f} s",
                f"{figures['baseline/actual']:.2f}",
                f"{peak:.0f}",
            ]
        )
    notes = [
        measured_with("python benchmarks/child_window.py"),
        f"Medians of {options.repeat} runs per backend, each in a fresh database; the machine is shared "
        "(2 cores, other helpers running) and drifts, so compare the ratios, measured in the same run.",
        "Baseline: the same children triggered at once on a worker of 4 slots (no resume between children).",
    ]
    header = ["backend", "makespan (k=4)", "ideal/actual", "baseline makespan", "baseline/actual", "peak in flight"]
    write_markdown("child_window", "Sliding window of children (wf.map_children, k=4)", header, rows, notes)


if __name__ == "__main__":
    main()
