"""Layers stack: a run's executor cap and a pool limit bound different steps at once.

`Executor.parallel(max_workers=8)` and a pool of limit 2: the pool's steps
never exceed 2 at once while the run's other steps fill the remaining
process slots alongside them. Steps run in loky processes and record their
intervals to a file (one clock, `time.monotonic()`, for every process).
"""

from __future__ import annotations

import time

import pytest

from tests.apps.steplog import intervals, log_line, read_log
from tidegate import Executor, Workflow
from tidegate.workflow.executors import process_pool

pytestmark = pytest.mark.slow

POOL_LIMIT = 2
POOL_STEPS = 6
FREE_STEPS = 12
SECONDS = 0.3


def _warm(workers: int) -> None:
    """Start the process pool before measuring: process start-up is not what this test is about."""
    pool = process_pool(workers)
    for future in [pool.submit(time.sleep, 0.05) for _ in range(workers)]:
        future.result(timeout=120)


def _concurrency_at(moment: float, spans: list[tuple[float, float]]) -> int:
    return sum(1 for start, end in spans if start <= moment < end)


def test_a_pool_limit_below_max_workers_bounds_only_that_pools_steps(app, start_worker, tmp_path):
    app.set_pool_limit("warehouse", POOL_LIMIT)
    log = str(tmp_path / "steps.log")

    @app.step(pool="warehouse")
    def pooled(n: int, log: str) -> int:
        log_line(log, "start", "pooled", n)
        time.sleep(SECONDS)
        log_line(log, "end", "pooled", n)
        return n

    @app.step
    def free(n: int, log: str) -> int:
        log_line(log, "start", "free", n)
        time.sleep(SECONDS)
        log_line(log, "end", "free", n)
        return n

    @app.workflow(name="t.stacked", executor=Executor.parallel(max_workers=8))
    def stacked(wf: Workflow, log: str):
        refs = [wf.step(pooled, n, log) for n in range(POOL_STEPS)]
        refs += [wf.step(free, n, log) for n in range(FREE_STEPS)]
        return wf.step(collect, refs)

    @app.step
    def collect(values: list[int]) -> list[int]:
        return values

    _warm(8)
    start_worker()
    run = stacked.submit(log=log)
    assert run.wait(timeout=120) == list(range(POOL_STEPS)) + list(range(FREE_STEPS))

    entries = read_log(tmp_path / "steps.log")
    pooled_spans = intervals(entries, "pooled")
    free_spans = intervals(entries, "free")
    assert len(pooled_spans) == POOL_STEPS and len(free_spans) == FREE_STEPS
    moments = sorted(start for start, _ in pooled_spans + free_spans)
    pool_peak = max(_concurrency_at(moment, pooled_spans) for moment in moments)
    total_peak = max(_concurrency_at(moment, pooled_spans + free_spans) for moment in moments)
    # free steps alongside pool steps: while the pool was in use, how many free steps ran too
    free_beside_pool = max(
        _concurrency_at(moment, free_spans) for moment in moments if _concurrency_at(moment, pooled_spans) > 0
    )
    assert pool_peak <= POOL_LIMIT  # the pool is never over its limit
    assert pool_peak == POOL_LIMIT  # ... and it was used up to it
    assert total_peak <= 8  # the executor's cap
    assert free_beside_pool >= 4, (free_beside_pool, total_peak)  # the rest kept filling (6 when unloaded)
    holders = app.store.pool_holders("warehouse")
    assert holders == []
