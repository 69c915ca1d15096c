"""The runs of a SIGKILLed worker come back in a few rounds, not one at a time.

A worker process running 6 runs is killed while a second worker with 8 free
slots is idle (lease 3 s). The rescued runs are suspects (domain/recovery.py):
they come back in two groups (halves of the crash), and the surviving worker
runs a group at once beside any other work. The runs hold until the test lets
them end (a file), so the proof is an order, not a time a stalled machine
stretches: three rescued runs run at once, and the log shows no fourth start
before one of them ended. One suspect at a time (the issue's 21 s for this
case, against its bound of 15 s) never has three running. No run is charged:
the crash had several runs in it.
"""

from pathlib import Path

import pytest

from tests.apps.counted import make_app
from tidegate import RunStatus

from .conftest import read_execution_log, wait_until

pytestmark = pytest.mark.slow

RUNS = 6


def most_at_once(entries: list[tuple[str, str, int]], attempt: int) -> int:
    """The most attempts numbered `attempt` started and not yet ended, over the log's lines in order."""
    open_ = peak = 0
    for kind, _, number in entries:
        if number == attempt:
            open_ += 1 if kind == "start" else -1
            peak = max(peak, open_)
    return peak


def started(log: Path, attempt: int) -> int:
    return sum(1 for kind, _, number in read_execution_log(log) if kind == "start" and number == attempt)


def test_the_runs_of_a_killed_worker_come_back_in_two_groups_each_run_at_once(database_url, worker_processes, tmp_path):
    log, hold = tmp_path / "executions.log", tmp_path / "hold"
    hold.write_text("the runs hold while this file exists")
    env = {"TIDEGATE_LEASE_DURATION": "3s", "TIDEGATE_TEST_LOG": str(log)}
    with make_app(database_url) as app:
        handles = app.tasks["counted.work"].submit_many([{"n": i, "hold": str(hold)} for i in range(RUNS)])
        doomed = worker_processes.spawn("tests.apps.counted:app", database_url, max_workers=RUNS, env=env)
        wait_until(lambda: started(log, 1) == RUNS, 60, message="the first worker to be running all 6 runs")
        survivor = worker_processes.spawn("tests.apps.counted:app", database_url, max_workers=8, env=env)
        wait_until(
            lambda: sum(1 for worker in app.store.list_workers() if worker.live) == 2,
            60,
            message="the second worker to register",
        )
        assert all(handle.status() is RunStatus.RUNNING for handle in handles)  # the survivor is idle
        worker_processes.kill(doomed)

        wait_until(lambda: started(log, 2) >= RUNS // 2, 120, message="a group of 3 rescued runs running at once")
        hold.unlink()
        wait_until(lambda: all(handle.status().finished for handle in handles), 120, message="every run")
        assert survivor.poll() is None, worker_processes.output(survivor)
        groups: set[str] = set()
        for handle in handles:
            assert handle.status() is RunStatus.COMPLETED, handle.info()
            rescues = [e for e in app.store.run_events(handle.id) if e.type == "RunRequeued"]
            assert rescues and not any(e.metadata["charged"] for e in rescues), [e.metadata for e in rescues]
            groups.add(rescues[0].metadata["group"])
        assert len(groups) == 2, groups  # the kill's rescue: the crash's two halves
        # The second attempts, all the survivor's: a group of three at once, and one group at a time.
        assert most_at_once(read_execution_log(log), attempt=2) == RUNS // 2, read_execution_log(log)
