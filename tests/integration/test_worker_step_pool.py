"""The loky step processes stop with the last worker of the process (issue 15 item 10).

They used to outlive an embedded (in-thread) worker, and so the test suite, by
minutes: the pool only lets an idle process go after IDLE_PROCESS_SECONDS.
"""

from __future__ import annotations

from pathlib import Path

from tests.conftest import wait_status, wait_until
from tidegate import App, Executor, Workflow
from tidegate.domain.model import RunStatus
from tidegate.workflow import executors


def double(n: int) -> int:
    return n * 2


def alive(pid: int) -> bool:
    """A process that exists and is not a zombie."""
    status = Path(f"/proc/{pid}/status")
    try:
        return "\tZ" not in next(line for line in status.read_text().splitlines() if line.startswith("State:"))
    except (FileNotFoundError, StopIteration):
        return False


def test_the_step_processes_stop_when_the_worker_stops(app: App) -> None:
    step = app.step(double)

    @app.workflow(name="t.doubled", executor=Executor.parallel(max_workers=1))
    def doubled(wf: Workflow, n: int):
        return wf.step(step, n)

    worker = app.worker().start()
    try:
        run_id = doubled.submit(n=21).id
        wait_status(app, run_id, RunStatus.COMPLETED, timeout=120)
        pool = executors._pool
        assert pool is not None
        pids = list(pool._processes)  # loky keeps its processes by pid
        assert pids and all(alive(pid) for pid in pids)
    finally:
        worker.stop(timeout=30, grace=0)
    assert executors._pool is None
    wait_until(lambda: not any(alive(pid) for pid in pids), timeout=30, message="the step processes to exit")
