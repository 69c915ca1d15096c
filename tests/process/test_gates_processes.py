"""The concurrency proof: worker processes claiming at once never exceed any scope's limit.

Worker processes run `tests.apps.gates:app` (every kind of run-level scope at
once: 2 per partition of queue `proof`, a per-region tag limit, an env=prod
tag limit and a global cap) and log each execution's start and end to a side
file. From those intervals the test computes the largest number of runs of
each scope ever executing together; an execution interval lies inside its
claim (the claim is written before the task starts and released after it
returns), so that number can only under-count what the database admitted,
never over-count it. PostgreSQL: 4 processes x 8 capacity; SQLite: 2 x 8.

Also here: the same load while an operator lowers the queue's limit live, and
a SIGKILLed worker whose held slots come back through lease recovery.
"""

from __future__ import annotations

import json
import random
from datetime import datetime

import pytest

from tests.apps import gates
from tests.apps.gates import make_app, max_overlap, overlap_by, read_intervals
from tidegate import RunStatus
from tidegate.engine.operators import limits as live

from .conftest import execute_sql, wait_until

pytestmark = pytest.mark.slow

REGIONS = 4
SIZES = {  # backend: (processes, runs, partitions)
    "postgres": (4, 2000, 50),
    "sqlite": (2, 800, 20),
}


def _submit_load(app, runs, partitions, seed):
    """Runs of 5-50 ms spread over partitions, regions and env; returns {run id: scopes}."""
    rng = random.Random(seed)
    work = app.tasks["gates.work"]
    groups: dict[tuple[str, str], list[dict]] = {}
    for i in range(runs):
        tags = (f"r{i % REGIONS}", "prod" if i % 3 == 0 else "dev")
        groups.setdefault(tags, []).append({"p": rng.randrange(partitions), "ms": rng.randint(5, 50)})
    scopes: dict[str, list[str]] = {}
    for (region, env), args in sorted(groups.items()):
        handles = work.options(tags={"region": region, "env": env}).submit_many(args)
        for handle, arg in zip(handles, args, strict=True):
            needs = ["global", f"queue:proof/p={arg['p']}", f"tag:region={region}"]
            if env == "prod":
                needs.append("tag:env=prod")
            scopes[handle.id] = needs
    return scopes


def _limit_of(scope):
    if scope == "global":
        return gates.GLOBAL_CAP
    if scope.startswith("queue:proof/"):
        return gates.PARTITION_LIMIT
    if scope.startswith("tag:region="):
        return gates.REGION_LIMIT
    assert scope == "tag:env=prod", scope
    return gates.PROD_LIMIT


def _spawn(worker_processes, database_url, count, log):
    env = {"TIDEGATE_TEST_LOG": str(log)}
    return [
        worker_processes.spawn("tests.apps.gates:app", database_url, max_workers=8, drain=True, env=env)
        for _ in range(count)
    ]


def _assert_all_completed_once(app, database_url, scopes, finished, unfinished):
    counts = app.store.status_counts()
    assert counts[RunStatus.COMPLETED] == len(scopes), counts
    assert sum(counts.values()) == len(scopes)
    assert unfinished == set()
    assert {run_id for run_id, _ in finished} == set(scopes)
    assert app.store.scope_usage() == {}
    assert execute_sql(database_url, "SELECT count(*) FROM tidegate_slot_holders")[0][0] == 0


def test_worker_processes_never_exceed_any_scope(database_url, backend, worker_processes, tmp_path):
    processes, runs, partitions = SIZES[backend]
    log = tmp_path / "intervals.log"
    with make_app(database_url) as app:
        scopes = _submit_load(app, runs, partitions, seed=7)
        spawned = _spawn(worker_processes, database_url, processes, log)
        worker_processes.wait_drained(spawned, timeout=120)

        finished, unfinished = read_intervals(log)
        _assert_all_completed_once(app, database_url, scopes, finished, unfinished)
        peaks = overlap_by(finished, lambda key: scopes[key[0]])
        over = {scope: peak for scope, peak in peaks.items() if peak > _limit_of(scope)}
        assert over == {}, f"scopes over their limit: {over}"
        # the limits really bound (a test that never reaches a limit proves nothing)
        assert max(p for s, p in peaks.items() if s.startswith("queue:proof/")) == gates.PARTITION_LIMIT
        # within one of it: the prod runs are a fraction of the load, and through a pooler on a loaded
        # 2-core machine their peak can fall one short (CI saw 4 of 5); over it is what fails above
        assert peaks["tag:env=prod"] >= gates.PROD_LIMIT - 1, peaks["tag:env=prod"]
        assert max(p for s, p in peaks.items() if s.startswith("tag:region=")) == gates.REGION_LIMIT
        assert peaks["global"] >= gates.GLOBAL_CAP - 4, peaks["global"]
        # the claims really were concurrent across processes (on a loaded 2-core machine one
        # process may start late and find the queue drained, so not necessarily all of them)
        dequeued = execute_sql(database_url, "SELECT metadata FROM tidegate_event_log WHERE type = 'RunDequeued'")
        assert len({_worker_of(metadata) for (metadata,) in dequeued}) >= 2


def _worker_of(metadata):
    return (json.loads(metadata) if isinstance(metadata, str) else metadata)["worker"]


def _seconds(value):
    return value.timestamp() if isinstance(value, datetime) else float(value)


def test_lowering_a_queue_limit_live_binds_every_later_claim(database_url, backend, worker_processes, tmp_path):
    processes, runs, partitions = {"postgres": (3, 900, 12), "sqlite": (2, 600, 12)}[backend]
    log = tmp_path / "intervals.log"
    with make_app(database_url) as app:
        scopes = _submit_load(app, runs, partitions, seed=11)
        spawned = _spawn(worker_processes, database_url, processes, log)
        wait_until(lambda: len(read_intervals(log)[0]) >= runs // 5, 120, 0.01, message="a fifth of the runs to finish")
        running_at_change = {run.id for run in app.store.page_runs(status=RunStatus.RUNNING, limit=1000)}
        change = live.set_limit(app.store, "queue:proof", 1)
        assert (change.old, change.new) == (gates.PARTITION_LIMIT, 1)
        worker_processes.wait_drained(spawned, timeout=120)

        finished, unfinished = read_intervals(log)
        _assert_all_completed_once(app, database_url, scopes, finished, unfinished)
        [(changed_at,)] = execute_sql(database_url, "SELECT at FROM tidegate_events WHERE type = 'LimitChanged'")
        changed_at = _seconds(changed_at)
        claimed_at = {
            run_id: _seconds(at)
            for run_id, at in execute_sql(
                database_url, "SELECT run_id, at FROM tidegate_events WHERE type = 'RunDequeued'"
            )
        }
        margin = 0.25  # claims racing the change may use either limit
        before = {key: iv for key, iv in finished.items() if claimed_at[key[0]] < changed_at - margin}
        after = {key: iv for key, iv in finished.items() if claimed_at[key[0]] > changed_at + margin}
        assert len(after) >= runs // 2, "the change came too late to test anything"

        def partition(key):
            return [s for s in scopes[key[0]] if s.startswith("queue:proof/")]

        # before the change the old limit bound; every claim after it respects the new one
        assert max(overlap_by(before, partition).values()) == gates.PARTITION_LIMIT
        peaks_after = overlap_by(after, partition)
        assert max(peaks_after.values()) == 1, {s: p for s, p in peaks_after.items() if p > 1}
        # once the runs claimed under the old limit were done, no partition ever ran two at once
        last_old_end = max(end for key, (_, end) in finished.items() if claimed_at[key[0]] <= changed_at + margin)
        later = {key: iv for key, iv in finished.items() if iv[0] > last_old_end}
        assert later and max(overlap_by(later, partition).values()) == 1
        # the other limits still hold throughout
        peaks = overlap_by(finished, lambda key: scopes[key[0]])
        assert {s: p for s, p in peaks.items() if not s.startswith("queue:") and p > _limit_of(s)} == {}
        # running runs were not preempted: each one running at the change completed on its first attempt
        assert running_at_change
        for run_id in running_at_change:
            record = app.run(run_id).info()
            assert (record.status, record.attempt) == (RunStatus.COMPLETED, 1)
            assert "RunRequeued" not in [e.type for e in app.store.run_events(run_id)]
        assert [o.target for o in app.store.limit_overrides()] == ["queue:proof"]


def test_a_sigkilled_worker_gives_its_slots_back_through_lease_recovery(database_url, worker_processes, tmp_path):
    log = tmp_path / "intervals.log"
    env = {"TIDEGATE_TEST_LOG": str(log), "TIDEGATE_LEASE_DURATION": "1s"}
    with make_app(database_url) as app:
        hold = app.tasks["gates.hold"].options(tags={"region": "r0"})
        held = hold.submit_many([{"seconds": 60}] * 3)
        held.append(hold.submit(seconds=0))  # queued behind the full queue
        process = worker_processes.spawn("tests.apps.gates:app", database_url, max_workers=8, env=env)

        def holding():
            assert process.poll() is None, worker_processes.output(process)
            _, unfinished = read_intervals(log)
            return len(unfinished) == gates.HELD_LIMIT

        wait_until(holding, 60, 0.02, message="the worker to hold the queue's 3 slots")
        assert app.store.scope_usage() == {"global": 3, "queue:held": 3, "tag:region=r0": 3}
        victims = {run.id for run in app.store.page_runs(status=RunStatus.RUNNING)}
        assert len(victims) == 3
        worker_processes.kill(process)
        assert app.store.scope_usage() == {"global": 3, "queue:held": 3, "tag:region=r0": 3}  # until the leases expire

        requeued: set[str] = set()

        def recovered():
            report = app.store.sweep("test-sweeper", 0.2)
            if report is not None:
                assert report.leaks_repaired == 0
                requeued.update(report.requeued)
            return requeued >= victims

        wait_until(recovered, 30, 0.1, message="the sweep to recover the dead worker's runs")
        assert app.store.scope_usage() == {}
        assert execute_sql(database_url, "SELECT count(*) FROM tidegate_slot_holders")[0][0] == 0
        assert (
            execute_sql(database_url, "SELECT count(*) FROM tidegate_events WHERE type = 'SlotLeakRepaired'")[0][0] == 0
        )

        drain = worker_processes.spawn("tests.apps.gates:app", database_url, max_workers=8, drain=True, env=env)
        worker_processes.wait_drained([drain], timeout=60)
        assert [handle.wait(timeout=5) for handle in held] == [2, 2, 2, 1]
        for run_id in victims:
            assert app.run(run_id).info().attempt == 2
        assert app.store.scope_usage() == {}
        assert (
            execute_sql(database_url, "SELECT count(*) FROM tidegate_events WHERE type = 'SlotLeakRepaired'")[0][0] == 0
        )
        finished, _ = read_intervals(log)
        held_ids = {h.id for h in held}
        assert max_overlap(iv for key, iv in finished.items() if key[0] in held_ids) <= gates.HELD_LIMIT
