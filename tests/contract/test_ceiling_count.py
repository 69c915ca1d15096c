"""An admission ceiling counts the active runs (queued, running, waiting) and reads only them.

The count runs on every submit that meets a ceiling, so it must cost the active runs, not the
table: finished runs pile up until retention takes them. On SQLite, with no statistics, the
planner once answered the count by scanning the whole listing index, finished runs and all
(16 ms a submit beside 220,000 finished runs); the count now reads only the live runs' entries.
"""

from __future__ import annotations

import sqlite3
from importlib import resources

import pytest

from tests.conftest import execute_sql
from tidegate import AdmissionRejected, RunQueueConfig
from tidegate.domain.limits import QueueConfig
from tidegate.domain.model import CycleRequest
from tidegate.storage.shared.sqlfile import parse_queries

from .conftest import LEASE, QUEUE, claim, completed, enqueue_one

OTHER = "other"
# partial indexes holding the runs of one live status each: queued, running, waiting
LIVE_PARTIAL = ("tidegate_runs_claim", "tidegate_runs_lease", "tidegate_runs_waiting")


def _finish(store, queue: str, runs: int) -> None:
    """`runs` runs of `queue` through claim and completion: finished, and no longer active."""
    for _ in range(runs):
        enqueue_one(store, queue)
    claimed = claim(store, limit=runs, queues=[queue])
    outcomes = [completed((run.id, run.attempt)) for run in claimed]
    store.cycle(CycleRequest("w1", [queue], [], outcomes, 0, LEASE))


@pytest.mark.parametrize("global_ceiling", [True, False], ids=["all queues", "one queue"])
def test_a_ceiling_counts_queued_and_running_runs_and_not_finished_ones(store, global_ceiling: bool) -> None:
    queues = [QueueConfig(QUEUE, max_active=None if global_ceiling else 3), QueueConfig(OTHER)]
    _finish(store, QUEUE, 5)  # five finished runs: none of them counts
    store.register_limits(RunQueueConfig(max_active=3 if global_ceiling else None), queues, [])
    enqueue_one(store)
    claim(store)  # one running
    enqueue_one(store)  # one queued
    if global_ceiling:
        enqueue_one(store, OTHER)  # a third, in another queue: counted by the global ceiling
    else:
        enqueue_one(store, OTHER)  # another queue's run: not counted by this queue's ceiling
        enqueue_one(store)
    with pytest.raises(AdmissionRejected):
        enqueue_one(store)


def _enqueue_active(backend: str) -> str:
    dialect = "postgres" if backend == "postgres" else "sqlite"
    text = resources.files(f"tidegate.storage.{dialect}").joinpath("runs.sql").read_text(encoding="utf-8")
    return parse_queries(text)["enqueue_active"]


def test_the_ceiling_count_reads_no_finished_run(store, database_url: str, backend: str) -> None:
    """The plan of the count, beside 3,000 finished runs, touches no index or table entry of theirs."""
    if backend == "postgres":
        execute_sql(
            database_url,
            "INSERT INTO tidegate_runs (id, task, queue, status, args, max_attempts, retry_backoff, submitted_at, "
            "queued_at, scheduled_at, finished_at) SELECT 'f' || g, 't', 'contract', 'completed', '{}', 1, 0, "
            "now(), now(), now(), now() FROM generate_series(1, 3000) AS g",
        )
        execute_sql(database_url, "ANALYZE tidegate_runs")
        for queue in (None, QUEUE):
            sql = _enqueue_active(backend).replace("%(queue)s::text", "NULL::text" if queue is None else f"'{queue}'")
            plan = "\n".join(row[0] for row in execute_sql(database_url, "EXPLAIN " + sql))
            assert "Seq Scan on tidegate_runs" not in plan, plan
        return
    execute_sql(
        database_url,
        "WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < 3000) "
        "INSERT INTO tidegate_runs (id, task, queue, status, args, max_attempts, retry_backoff, submitted_at, "
        "queued_at, scheduled_at, finished_at) SELECT 'f' || n, 't', 'contract', 'completed', '{}', 1, 0, 0, 0, 0, 0 "
        "FROM g",
    )
    connection = sqlite3.connect(database_url[len("sqlite:///") :])
    try:
        plans = [
            connection.execute("EXPLAIN QUERY PLAN " + _enqueue_active(backend), {"queue": queue}).fetchall()
            for queue in (None, QUEUE)
        ]
    finally:
        connection.close()
    for plan in plans:
        reads = [row[3] for row in plan if row[3].startswith(("SCAN tidegate_runs", "SEARCH tidegate_runs"))]
        assert reads, plan
        for read in reads:
            # the listing index searched by queue and status, or a partial index of one live status
            assert read.startswith("SEARCH") or any(f"INDEX {index}" in read for index in LIVE_PARTIAL), reads
