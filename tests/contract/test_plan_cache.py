"""PostgreSQL plans the hot statements once per connection, and those generic plans stay good beside a backlog.

Left to `plan_cache_mode = auto`, PostgreSQL planned `enqueue`, `claim_window`,
`claim_runs` and `next_due` again on nearly every call, and planning cost more
than executing (docs/postgres-profile.md, lever 1). The store's sessions now
force generic plans (storage/postgres/database.py). These tests catch a change
that brings re-planning back, a hot statement whose generic plan would walk a
large backlog of blocked and finished runs, and an operator read with optional
filters that would be given one generic plan for every mix of filters.
PostgreSQL 15 has no `EXPLAIN (GENERIC_PLAN)`: a generic plan is read as
`EXPLAIN EXECUTE` of a prepared statement under `force_generic_plan`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import psycopg
import pytest

from tests.contract.conftest import QUEUE, claim, completed, enqueue_one
from tidegate.bootstrap import open_store
from tidegate.domain.clock import ShiftedClock
from tidegate.domain.model import CycleRequest, RunStatus
from tidegate.storage.port import Store
from tidegate.storage.postgres.database import PLAN_CACHE_MODE, PLANNED_PER_CALL, PREPARE_THRESHOLD
from tidegate.storage.shared.sqlfile import load_queries

QUERIES = load_queries("tidegate.storage.postgres")
BACKLOG = 100_000  # queued runs behind saturated partitions, and as many finished runs
PARTITIONS = 10
# Each hot statement's generic plan reaches tidegate_runs only through these indexes. cycle_reports locks the
# worker's running runs: by worker, by id, or (as ANALYZE's sample has it) the running runs by status; each
# reads only running runs, never the backlog.
HOT = {
    "enqueue": {"tidegate_runs_active", "tidegate_runs_retention"},
    # a keyed submit's holders: each key row's run by id (a plan of its own once hash-joined every run)
    "enqueue_unique_free": {"tidegate_runs_pkey"},
    "claim_window": {"tidegate_runs_claim"},
    "claim_partitions": {"tidegate_runs_partition"},
    "claim_runs": {"tidegate_runs_pkey"},
    "claim_runs_free": {"tidegate_runs_claim", "tidegate_runs_pkey", "tidegate_runs_due"},
    "next_due": {"tidegate_runs_due"},
    "cycle_reports": {"tidegate_runs_worker", "tidegate_runs_pkey", "tidegate_runs_status"},
    # every sweep: the running runs (by lease or by worker) and the runs rescued from their worker
    "sweep_lost": {
        "tidegate_runs_lease",
        "tidegate_runs_worker",
        "tidegate_runs_rescued_from",
        "tidegate_runs_status",
        "tidegate_runs_pkey",
    },
}
OPTIONAL_FILTER = re.compile(r"%\((\w+)\)s::\w+ IS NULL OR ")


@pytest.fixture
def pg_store(postgres_url: str, clock: ShiftedClock) -> Iterator[Store]:
    opened = open_store(postgres_url, clock=clock)
    try:
        yield opened
    finally:
        opened.close()


def prepared(store: Store) -> list[tuple[str, int, int]]:
    """(statement, generic plans, custom plans) of the prepared statements of the store's (one) connection."""
    with store._connection() as connection:  # type: ignore[attr-defined]
        rows = connection.execute(
            "SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements", prepare=False
        ).fetchall()
    return [(statement, generic, custom) for statement, generic, custom in rows]


def test_postgres_sessions_plan_hot_statements_once(pg_store: Store) -> None:
    with pg_store._connection() as connection:  # type: ignore[attr-defined]
        mode = connection.execute("SHOW plan_cache_mode", prepare=False).fetchone()
        assert mode == (PLAN_CACHE_MODE,) == ("force_generic_plan",)
        assert connection.prepare_threshold == PREPARE_THRESHOLD <= 1
    for _ in range(3):
        enqueue_one(pg_store)
        (run,) = claim(pg_store)
        pg_store.cycle(CycleRequest("w1", [QUEUE], [run.fence], [completed(run.fence)], 0, 30.0))

    # The queue has no limit: after the first claim (which caches the rules) a claim is claim_runs_free; and no
    # ceiling: after the first submit (which reads the ceilings) a submit is enqueue_free.
    hot = ("enqueue_free", "claim_runs_free")
    plans = {name: [row for row in prepared(pg_store) if _is(name, row[0])] for name in hot}
    for name, rows in plans.items():
        assert len(rows) == 1, f"{name} is not prepared on the store's connection: {rows}"
        (_, generic, custom) = rows[0]
        assert generic >= 1 and custom == 0, f"{name}: {generic} generic and {custom} custom plans"


def test_postgres_sessions_are_read_committed_whatever_the_servers_default(postgres_url: str) -> None:
    """A submit is an implicit transaction (no BEGIN to name its isolation): its count must see
    every submit committed before its ceiling's lock was granted, so the session's default is set."""
    url = postgres_url.replace("?options=", "?options=-cdefault_transaction_isolation%3Dserializable%20")
    store = open_store(url)
    try:
        with store._connection() as connection:  # type: ignore[attr-defined]
            assert connection.execute("SHOW default_transaction_isolation", prepare=False).fetchone() == (
                "read committed",
            )
        enqueue_one(store)
        assert store.status_counts(QUEUE)[RunStatus.QUEUED] == 1
    finally:
        store.close()


def test_postgres_hot_generic_plans_walk_their_index_beside_a_large_backlog(pg_store: Store, postgres_url: str) -> None:
    for _ in range(PARTITIONS):
        enqueue_one(pg_store, partition="p")  # a template row per partition, copied below
    with psycopg.connect(postgres_url, autocommit=True, prepare_threshold=None) as connection:
        _fill(connection)
        connection.execute("SET plan_cache_mode = force_generic_plan")
        connection.execute("SET jit = off")
        for name, indexes in HOT.items():
            plan = _generic_plan(connection, QUERIES[name])
            assert not re.search(r"Seq Scan on tidegate_(runs|events)\b", plan), f"{name} scans a table:\n{plan}"
            used = set(re.findall(r"Index (?:Only )?Scan(?: Backward)? using (\w+) on tidegate_runs\b", plan))
            assert used and used <= indexes, f"{name} reads tidegate_runs through {used}, not {indexes}:\n{plan}"


def test_postgres_reads_with_optional_filters_are_planned_per_call(pg_store: Store) -> None:
    optional = {name for name, text in QUERIES.items() if OPTIONAL_FILTER.search(text)}
    assert optional == PLANNED_PER_CALL, "a read with optional filters needs a plan per call (PLANNED_PER_CALL)"
    enqueue_one(pg_store)
    for _ in range(3):  # past PREPARE_THRESHOLD: a statement psycopg may prepare is prepared by now
        pg_store.page_runs(status=RunStatus.FAILED)
        pg_store.page_runs(status=RunStatus.FAILED, queue=QUEUE, limit=10)
        pg_store.status_counts(QUEUE)
        pg_store.list_queued(QUEUE)
        pg_store.finished_count(60.0, queue=QUEUE)
        pg_store.run_pace(60.0, queue=QUEUE)
    kept = [statement for statement, _, _ in prepared(pg_store) if " IS NULL OR " in statement]
    assert kept == [], f"optional-filter reads were prepared (one generic plan for every filter): {kept}"


def _is(name: str, statement: str) -> bool:
    """Whether a prepared statement's text is the named query (psycopg numbers its placeholders)."""
    return _numbered(QUERIES[name]) == statement


def _numbered(sql: str) -> str:
    """The query as psycopg sends it: each `%(name)s` becomes `$n`, numbered by first appearance."""
    names = list(dict.fromkeys(re.findall(r"%\((\w+)\)s", sql)))
    return re.sub(r"%\((\w+)\)s", lambda match: f"${names.index(match.group(1)) + 1}", sql).replace("%%", "%")


def _generic_plan(connection: psycopg.Connection[tuple[object, ...]], sql: str) -> str:
    """The plan PostgreSQL keeps for the statement under force_generic_plan (the values sent do not matter)."""
    connection.execute("DEALLOCATE ALL")
    connection.execute("PREPARE hot AS " + _numbered(sql))
    count = len(set(re.findall(r"%\((\w+)\)s", sql)))
    arguments = f"({', '.join(['NULL'] * count)})" if count else ""
    return "\n".join(row[0] for row in connection.execute(f"EXPLAIN EXECUTE hot{arguments}").fetchall())


def _fill(connection: psycopg.Connection[tuple[object, ...]]) -> None:
    """BACKLOG queued runs over PARTITIONS partitions, one running run holding each, BACKLOG finished; ANALYZE.

    Copied from the template rows in SQL: the plans depend on the table's
    statistics, not on how the rows came in (benchmarks/blocked_backlog.py
    fills the same shape through the app, and measures it).
    """
    connection.execute(
        """
        INSERT INTO tidegate_runs (id, task, queue, partition_key, status, priority, args, tags, attempt,
            max_attempts, retry_backoff, submitted_at, queued_at, scheduled_at, started_at, finished_at, worker_id,
            lease_expires_at)
        SELECT t.id || '-' || s.status || '-' || g.n, t.task, t.queue, 'p' || (g.n %% %(partitions)s), s.status,
               t.priority, t.args, t.tags, CASE WHEN s.status = 'queued' THEN 0 ELSE 1 END, t.max_attempts,
               t.retry_backoff, t.submitted_at, t.queued_at, t.scheduled_at,
               CASE WHEN s.status = 'queued' THEN NULL ELSE now() END,
               CASE WHEN s.status = 'completed' THEN now() END,
               CASE WHEN s.status = 'running' THEN 'holder' END,
               CASE WHEN s.status = 'running' THEN now() + interval '1 hour' END
        FROM (SELECT * FROM tidegate_runs LIMIT 1) AS t
        CROSS JOIN (VALUES ('queued', %(backlog)s), ('completed', %(backlog)s), ('running', %(partitions)s))
            AS s(status, size)
        CROSS JOIN LATERAL generate_series(1, s.size) AS g(n)
        """,
        {"backlog": BACKLOG, "partitions": PARTITIONS},
    )
    connection.execute("ALTER TABLE tidegate_runs SET (autovacuum_enabled = false)")
    # This schema's tables only: a database-wide ANALYZE locks other schemas' tables and the catalogs
    # too, and deadlocks with another one beside it (the suite runs on two processes).
    tables = connection.execute("SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")
    connection.execute("ANALYZE " + ", ".join(f'"{table}"' for (table,) in tables.fetchall()))
