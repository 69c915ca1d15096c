"""Makespan of a workflow's steps through a pool: 200 steps of 50 ms, pool limit 4, Executor.parallel(8).

    python benchmarks/workflow_makespan.py [--steps 200] [--repeat 3] [--backends sqlite,postgres]

One workflow run of `--steps` independent sync steps, each claiming one slot
of pool `bench` (limit 4) and sleeping 50 ms in a loky process, under
`Executor.parallel(max_workers=8)`, executed by one in-process worker. The
process pool is started (and its processes have imported this module) before
the clock starts: start-up is paid once per worker process, not per run.
Reported, per backend, the median over --repeat fresh databases of:
- the makespan: first step start to last step end, as the steps measured
  them (`time.monotonic()`, one clock for every process);
- ideal / actual, where ideal = steps x 50 ms / 4 (2.5 s for 200 steps);
- the run's wall time, submit to result (the DAG build, checkpoint reads and
  the run's claim and completion included);
- the maximum number of steps executing at once (the worst over the
  repeats), which must be <= 4.

The baseline, measured in the same run: the loky floor. The same 200 sleeps
through the same process pool, fed by 4 asyncio loops that each submit the
next as soon as the last returns, with no database, no slots and no
workflow: what the process pool alone allows on this machine. Reported as
floor / actual (1.0: tidegate costs nothing on top of the pool).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from rich.console import Console

import tidegate
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
from tidegate import Executor, StepRef, Workflow
from tidegate.workflow.executors import process_pool

POOL = "bench"
POOL_LIMIT = 4
MAX_WORKERS = 8
SLEEP = 0.05
FLOOR = "loky floor (no tidegate)"
console = Console()


def build(url: str) -> tuple[tidegate.App, tidegate.Task]:
    app = tidegate.App(url)

    @app.step(pool=POOL)
    def sleep50(n: int) -> list[float]:
        started = time.monotonic()
        time.sleep(SLEEP)
        return [started, time.monotonic()]

    @app.workflow(name="bench.makespan", queue="bench", executor=Executor.parallel(max_workers=MAX_WORKERS))
    def makespan(wf: Workflow, steps: int) -> StepRef:
        return wf.step(collect, [wf.step(sleep50, n) for n in range(steps)])

    @app.step
    async def collect(spans: list[list[float]]) -> list[list[float]]:
        return spans

    return app, makespan


def floor_step() -> Callable[[int], list[float]]:
    """The steps' body, built in a function so cloudpickle ships it by value, as it ships the steps."""

    def sleep50(n: int) -> list[float]:
        started = time.monotonic()
        time.sleep(SLEEP)
        return [started, time.monotonic()]

    return sleep50


def measure_floor(steps: int) -> dict[str, float]:
    """The same sleeps through the same pool, POOL_LIMIT at a time, with nothing of tidegate."""
    pool, step = process_pool(MAX_WORKERS), floor_step()

    async def lane(numbers: range) -> list[list[float]]:
        return [await asyncio.wrap_future(pool.submit(step, n)) for n in numbers]

    async def lanes() -> list[list[float]]:
        spans = await asyncio.gather(*(lane(range(first, steps, POOL_LIMIT)) for first in range(POOL_LIMIT)))
        return [span for lane_spans in spans for span in lane_spans]

    started = time.monotonic()
    intervals = [(start, end) for start, end in asyncio.run(lanes())]
    makespan = max(end for _, end in intervals) - min(start for start, _ in intervals)
    return {"makespan": makespan, "wall": time.monotonic() - started, "concurrency": max_overlap(intervals)}


def warm() -> None:
    """Start the loky processes and let each import what the steps need."""
    pool = process_pool(MAX_WORKERS)
    for future in [pool.submit(time.sleep, 0.2) for _ in range(MAX_WORKERS * 2)]:
        future.result(timeout=300)


def measure(backend: str, steps: int) -> dict[str, float]:
    with fresh_database(backend) as url:
        app, workflow = build(url)
        try:
            app.set_pool_limit(POOL, POOL_LIMIT)
            worker = app.worker(max_workers=2).start()
            try:
                submitted = time.monotonic()
                spans = workflow.submit(steps=steps).wait(timeout=600)
                wall = time.monotonic() - submitted
            finally:
                worker.stop(timeout=60, grace=0)
        finally:
            app.close()
    intervals = [(start, end) for start, end in spans]
    makespan = max(end for _, end in intervals) - min(start for start, _ in intervals)
    return {"makespan": makespan, "wall": wall, "concurrency": max_overlap(intervals)}


def main() -> None:
    options = parse_options(
        __doc__, runs=None, extra=lambda parser: parser.add_argument("--steps", type=int, default=200)
    )
    ideal = options.steps * SLEEP / POOL_LIMIT
    warm()

    def measure_either(backend: str) -> dict[str, float]:
        return measure_floor(options.steps) if backend == FLOOR else measure(backend, options.steps)

    results: dict[str, dict[str, float]] = {}
    backends = f"{FLOOR},{options.backends}"
    for backend, samples in repeated(backends, options.repeat, measure_either, console).items():
        figures = medians(samples)
        figures["concurrency"] = max(sample["concurrency"] for sample in samples)
        results[backend] = figures
    floor = results[FLOOR]["makespan"]
    header = [
        "backend",
        "makespan",
        "ideal / actual",
        "loky floor / actual",
        "overhead per step and slot",
        "run wall time",
        "max steps at once",
    ]
    rows = [
        [
            backend,
            f"{f['makespan']:.2f} s",
            f"{ideal / f['makespan']:.3f}",
            f"{floor / f['makespan']:.3f}",
            f"{(f['makespan'] * POOL_LIMIT / options.steps - SLEEP) * 1000:.1f} ms",
            f"{f['wall']:.2f} s",
            f"{f['concurrency']:.0f}",
        ]
        for backend, f in results.items()
    ]
    title = (
        f"Workflow makespan, {options.steps} steps of {SLEEP * 1000:.0f} ms through a pool of limit {POOL_LIMIT}, "
        f"Executor.parallel(max_workers={MAX_WORKERS}), median of {options.repeat}"
    )
    print_table(console, title, header, rows)
    path = write_markdown(
        "workflow_makespan",
        title,
        header,
        rows,
        [
            measured_with(f"python benchmarks/workflow_makespan.py --steps {options.steps} --repeat {options.repeat}"),
            f"Ideal makespan: {options.steps} x {SLEEP * 1000:.0f} ms / {POOL_LIMIT} = {ideal:.2f} s; the aim is "
            "ideal / actual >= 0.95.",
            "Makespan runs from the first step's start to the last step's end as the steps measured them; the run's "
            "wall time adds the run's claim, the DAG build and checkpoint reads, and the result's return. "
            "Overhead per step and slot = makespan x limit / steps - 50 ms: a step's result coming back from its "
            "process, the hand-off of its slot to the next step of the run (in memory; the store write that moves "
            "the holder row follows, off the critical path) and that step's dispatch to a process.",
            "The loky process pool is started before measuring (once per worker process, reused by every run).",
            "Loky floor: the same sleeps through the same pool, fed by 4 asyncio loops with no database, slots or "
            "workflow (its wall time is its makespan plus the first dispatch): the best the pool itself allows here.",
        ],
    )
    console.print(f"written to {path}")


if __name__ == "__main__":
    main()
