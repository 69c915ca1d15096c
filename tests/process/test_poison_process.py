"""A poison run that kills its worker process fails alone; the runs beside it complete.

One worker process (capacity 4), restarted whenever it dies, serves a run
whose task calls `os._exit(1)` on every attempt and 5 quick runs, all
`max_attempts=3`. The rescue charges an attempt only to a run that started
and whose crash was surely its own (domain/recovery.py): so the poison ends
failed after exactly 3 charged attempts, each one run alone as a suspect
once its group was split down to it, and every quick run completes.
"""

from collections import defaultdict

import pytest

from tests.apps.poison import make_app
from tidegate import RunStatus

from .conftest import wait_until

pytestmark = pytest.mark.slow

QUICK = 5


def _log(path):
    if not path.exists():
        return []
    entries = []
    for line in path.read_text().splitlines():
        kind, run_id, attempt, pid, at = line.split()
        entries.append((kind, run_id, int(attempt), int(pid), float(at)))
    return entries


def test_a_poison_run_fails_alone_and_innocent_runs_complete(database_url, worker_processes, tmp_path):
    log = tmp_path / "executions.log"
    env = {"TIDEGATE_LEASE_DURATION": "1s", "TIDEGATE_TEST_LOG": str(log)}
    with make_app(database_url) as app:
        poison = app.tasks["poison.crash"].submit()
        quick = app.tasks["poison.quick"].submit_many([{"n": i} for i in range(QUICK)])
        handles = [poison, *quick]
        processes = [worker_processes.spawn("tests.apps.poison:app", database_url, max_workers=4, env=env)]

        def all_finished():
            if processes[-1].poll() is not None:  # it died (the poison): restart it
                assert len(processes) < 20, "the worker was restarted too often: the poison loops"
                processes.append(worker_processes.spawn("tests.apps.poison:app", database_url, max_workers=4, env=env))
            return all(handle.status().finished for handle in handles)

        wait_until(all_finished, 120, 0.05, message="every run to finish")

        assert poison.status() is RunStatus.FAILED
        for handle in quick:
            assert handle.status() is RunStatus.COMPLETED, (handle.info(), app.store.run_events(handle.id))

        # the poison was charged exactly max_attempts attempts, each one it started
        events = app.store.run_events(poison.id)
        started = {event.metadata["attempt"] for event in events if event.type == "RunStarted"}
        rescues = [event for event in events if event.type in ("RunRequeued", "RunFailed")]
        charged = [event.metadata["attempt"] for event in rescues if event.metadata["charged"]]
        assert len(charged) == 3, [event.metadata for event in rescues]
        assert set(charged) <= started, "an attempt was charged that never started"
        assert rescues[-1].type == "RunFailed" and rescues[-1].metadata["charged"]
        assert "alone as a suspect" in rescues[-1].metadata["why"]
        assert processes and len(processes) >= 4  # killed at least once per charged attempt

        # no innocent run was ever charged
        for handle in quick:
            for event in app.store.run_events(handle.id):
                if event.type in ("RunRequeued", "RunFailed"):
                    assert not event.metadata["charged"], event.metadata

        # each attempt charged to the poison was its own crash: every other run started in its
        # process had ended (the rescued runs came back in groups; no group but the poison's was left)
        entries = _log(log)
        ended = {(run_id, attempt) for kind, run_id, attempt, _, _ in entries if kind == "end"}
        by_pid = defaultdict(list)
        for entry in entries:
            by_pid[entry[3]].append(entry)
        poison_starts = [e for e in entries if e[0] == "start" and e[1] == poison.id and e[2] in set(charged)]
        assert len(poison_starts) == 3
        for _, _, attempt, pid, at in poison_starts:
            beside = [
                (run_id, other)
                for kind, run_id, other, _, when in by_pid[pid]
                if kind == "start" and run_id != poison.id and when <= at and (run_id, other) not in ended
            ]
            assert not beside, f"charged attempt {attempt} of the poison ran beside {beside}"
