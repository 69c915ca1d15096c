"""A worker process killed with SIGKILL loses nothing: its runs are re-run after their leases expire.

Worker processes run `tests/apps/run_worker.py tests.apps.counted:app`; every
execution appends `start`/`end <run id> <attempt>` to a side file, so the test
sees which attempts were cut short by a kill and that each was run again.
"""

import random
from collections import defaultdict
from pathlib import Path

import pytest

from tests.apps.counted import make_app
from tidegate import App, RunStatus

from .conftest import read_execution_log, wait_until

pytestmark = pytest.mark.slow

RUNS = 60
KILLS = 3


def _unfinished(entries):
    started = {(run_id, attempt) for kind, run_id, attempt in entries if kind == "start"}
    ended = {(run_id, attempt) for kind, run_id, attempt in entries if kind == "end"}
    return started - ended


def _attempts_each_run_started(app: App, expected: dict[str, int], log: Path) -> dict[str, list[int]]:
    """The attempts each run started, checked: every run executed, no attempt twice, and its last one finished."""
    entries = read_execution_log(log)
    attempts: defaultdict[str, list[int]] = defaultdict(list)
    for kind, run_id, attempt in entries:
        assert run_id in expected
        if kind == "start":
            attempts[run_id].append(attempt)
    assert set(attempts) == set(expected)  # every run really executed
    for run_id, started in attempts.items():
        record = app.run(run_id).info()
        assert len(started) == len(set(started)), f"{run_id}: an attempt ran twice: {started}"
        assert max(started) == record.attempt
        assert ("end", run_id, record.attempt) in entries  # the completing attempt finished
    return attempts


def _assert_rescued(app: App, killed_attempts: set[tuple[str, int]], held_at_kill: set[str]) -> None:
    """Each attempt cut short by a kill was re-run later, once its lease or its worker's heartbeat
    expired; and every run the dead workers held was rescued, not just those seen running."""
    assert len(killed_attempts) >= KILLS
    for run_id, attempt in killed_attempts:
        record = app.run(run_id).info()
        assert record.attempt > attempt
        rescues = [e for e in app.store.run_events(run_id) if e.type == "RunRequeued"]
        # lost by its lease or by its worker's heartbeat, whichever the sweep saw first
        assert any(e.metadata.get("reason") in ("lease expired", "worker gone") for e in rescues), rescues
    for run_id in held_at_kill:
        assert app.run(run_id).info().attempt >= 2


def test_sigkilled_workers_lose_no_run(database_url, worker_processes, tmp_path):
    log = tmp_path / "executions.log"
    env = {"TIDEGATE_LEASE_DURATION": "1s", "TIDEGATE_TEST_LOG": str(log)}
    rng = random.Random(1234)
    with make_app(database_url) as app:
        work = app.tasks["counted.work"]
        handles = work.submit_many([{"n": i, "seconds": rng.uniform(0.05, 0.2)} for i in range(RUNS)])
        expected = {handle.id: i for i, handle in enumerate(handles)}

        killed_attempts: set[tuple[str, int]] = set()  # started, never ended: cut short by a kill
        held_at_kill: set[str] = set()  # runs the dead worker held (claimed or running)
        kills = 0
        spawned = 0
        while kills < KILLS:
            assert spawned < KILLS + 4, "could not kill a worker in the middle of a run"
            spawned += 1
            seen_before = len(read_execution_log(log))
            process = worker_processes.spawn("tests.apps.counted:app", database_url, max_workers=4, env=env)

            def busy(seen_before=seen_before, process=process):
                assert process.poll() is None, worker_processes.output(process)
                new = read_execution_log(log)[seen_before:]
                starts = sum(1 for kind, _, _ in new if kind == "start")
                return starts >= 3 and _unfinished(new)

            wait_until(busy, 60, 0.01, message="the worker process to be running several runs")
            worker_processes.kill(process)
            unfinished = _unfinished(read_execution_log(log)) - killed_attempts
            held = {run.id for run in app.store.page_runs(status=RunStatus.RUNNING, limit=1000)}
            if unfinished:  # else every in-flight run ended just before the kill: try again
                kills += 1
                killed_attempts |= unfinished
                held_at_kill |= held
                assert {run_id for run_id, _ in unfinished} <= held

        assert app.store.status_counts()[RunStatus.COMPLETED] < RUNS  # work remained after the kills
        final = worker_processes.spawn("tests.apps.counted:app", database_url, max_workers=4, drain=True, env=env)
        try:
            final.wait(timeout=120)
        except Exception:
            pytest.fail("the draining worker did not finish:\n" + worker_processes.output(final))
        assert final.returncode == 0, worker_processes.output(final)

        # every run ended completed, with its own result: none lost
        counts = app.store.status_counts()
        assert counts[RunStatus.COMPLETED] == RUNS, counts
        assert sum(counts.values()) == RUNS
        for run_id, n in expected.items():
            assert app.run(run_id).wait(timeout=1) == n

        attempts = _attempts_each_run_started(app, expected, log)
        _assert_rescued(app, killed_attempts, held_at_kill)
        executions = sum(len(started) for started in attempts.values())
        assert executions >= RUNS + len(killed_attempts)
