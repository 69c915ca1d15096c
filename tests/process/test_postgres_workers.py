"""PostgreSQL, the distributed engine: several worker processes drain one queue, each run exactly once."""

from collections import Counter

import pytest

from tests.apps.counted import make_app
from tidegate import RunStatus

from .conftest import read_execution_log

pytestmark = pytest.mark.slow

RUNS = 2000
PROCESSES = 4


def test_four_worker_processes_execute_each_of_2000_runs_exactly_once(postgres_url, worker_processes, tmp_path):
    log = tmp_path / "executions.log"
    env = {"TIDEGATE_TEST_LOG": str(log)}
    with make_app(postgres_url) as app:
        work = app.tasks["counted.work"]
        handles = work.submit_many([{"n": i} for i in range(RUNS)])
        ids = {handle.id for handle in handles}
        assert len(ids) == RUNS
        processes = [
            worker_processes.spawn("tests.apps.counted:app", postgres_url, max_workers=8, drain=True, env=env)
            for _ in range(PROCESSES)
        ]
        worker_processes.wait_drained(processes, timeout=240)

        counts = app.store.status_counts()
        assert counts[RunStatus.COMPLETED] == RUNS, counts
        assert sum(counts.values()) == RUNS

        entries = read_execution_log(log)
        starts = Counter(run_id for kind, run_id, _ in entries if kind == "start")
        ends = Counter(run_id for kind, run_id, _ in entries if kind == "end")
        assert set(starts) == ids
        assert [run_id for run_id, count in starts.items() if count != 1] == []
        assert ends == starts
        assert {attempt for _, _, attempt in entries} == {1}
        # the work was shared: more than one process claimed runs
        workers = {run.worker_id for run in app.store.page_runs(limit=1)}  # released on completion
        assert workers == {None}
        claimed_by = Counter(
            event.metadata["worker"]
            for handle in handles[:: RUNS // 100]
            for event in app.store.run_events(handle.id)
            if event.type == "RunDequeued"
        )
        assert len(claimed_by) >= 2, claimed_by
