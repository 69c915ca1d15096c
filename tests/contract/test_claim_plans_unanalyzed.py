"""A claim writes the runs it claims by primary key, also before the table was ever analyzed.

Generic plans are made once per connection and kept (database.py, `_configure`), so a plan made
while the runs table has no statistics yet (a new deployment, a burst of submits before
autovacuum's first ANALYZE) serves that connection for its whole life. With a condition on
`status = 'queued'` in the claim's UPDATE, that plan reached the 8 runs it claims through a
partial index of every queued run: a claim of 8 beside 3,000 queued runs read all 3,000
(0.45 of its 0.7 ms; issue 16's no-limit drain). test_plan_cache.py checks the same plans
beside 100,000 runs after ANALYZE.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import psycopg
import pytest

from tidegate.bootstrap import open_store
from tidegate.storage.port import Store

from .conftest import enqueue_one
from .test_plan_cache import QUERIES, _generic_plan

QUEUED = 3_000


@pytest.fixture
def pg_store(postgres_url: str) -> Iterator[Store]:
    opened = open_store(postgres_url)
    try:
        yield opened
    finally:
        opened.close()


@pytest.mark.parametrize("name", ["claim_runs", "claim_runs_free"])
def test_a_claims_generic_plan_writes_its_runs_by_primary_key_before_any_analyze(
    pg_store: Store, postgres_url: str, name: str
) -> None:
    enqueue_one(pg_store)  # a template row, copied below
    with psycopg.connect(postgres_url, autocommit=True, prepare_threshold=None) as connection:
        connection.execute("ALTER TABLE tidegate_runs SET (autovacuum_enabled = false)")  # no ANALYZE meanwhile
        connection.execute(
            """
            INSERT INTO tidegate_runs (id, task, queue, partition_key, status, priority, args, tags, attempt,
                max_attempts, retry_backoff, submitted_at, queued_at, scheduled_at)
            SELECT t.id || '-' || g.n, t.task, t.queue, t.partition_key, 'queued', t.priority, t.args, t.tags, 0,
                   t.max_attempts, t.retry_backoff, t.submitted_at, t.queued_at, t.scheduled_at
            FROM (SELECT * FROM tidegate_runs LIMIT 1) AS t CROSS JOIN generate_series(1, %(queued)s) AS g(n)
            """,
            {"queued": QUEUED},
        )
        connection.execute("SET plan_cache_mode = force_generic_plan")
        connection.execute("SET jit = off")
        plan = _generic_plan(connection, QUERIES[name])
    update = plan[plan.index("Update on tidegate_runs r") :]
    update = update.split("\n  CTE ")[0]  # the claim's UPDATE, up to the statement's next part
    assert "Seq Scan on tidegate_runs r" not in update, f"{name} scans the table for the runs it claims:\n{plan}"
    indexes = set(re.findall(r"(?:Index (?:Only )?Scan using|Bitmap Index Scan on) (\w+)", update))
    assert indexes == {"tidegate_runs_pkey"}, f"{name} reaches the runs it claims through {indexes}:\n{plan}"
