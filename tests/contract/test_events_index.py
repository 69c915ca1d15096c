"""The events index is keyed by run_id alone (migration 0019), and a run's events are still read
through it, oldest first.

Why it matters is bytes: on PostgreSQL a key of (run_id) lets B-tree deduplication keep one key
and a posting list per run instead of one entry per event, the cheapest cut of bytes per run
(docs/postgres-scale.md). On SQLite every entry ends with the rowid (the event id): the same
definition there only stops storing the id twice.
"""

from __future__ import annotations

import pytest

from tests.conftest import execute_sql
from tidegate.storage.port import Store

RUNS = 2000
EVENTS_PER_RUN = 4


def _fill(database_url: str, backend: str) -> None:
    """RUNS runs' lifecycle events as a drain writes them: each phase of every run, phase after phase."""
    if backend == "postgres":
        execute_sql(
            database_url,
            "INSERT INTO tidegate_events (run_id, type, metadata, at) "
            "SELECT lpad(mod(g, ?)::text, 26, '0'), 'RunQueued', '{}', now() FROM generate_series(0, ? - 1) AS g",
            (RUNS, RUNS * EVENTS_PER_RUN),
        )
        execute_sql(database_url, "ANALYZE tidegate_events")
    else:
        execute_sql(
            database_url,
            "WITH RECURSIVE g(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM g WHERE n + 1 < ?) "
            "INSERT INTO tidegate_events (run_id, type, metadata, at) "
            "SELECT substr('00000000000000000000000000' || (n % ?), -26), 'RunQueued', '{}', 0 FROM g",
            (RUNS * EVENTS_PER_RUN, RUNS),
        )
        execute_sql(database_url, "ANALYZE")


def test_the_events_index_is_keyed_by_run_id_alone(store: Store, database_url: str, backend: str) -> None:
    if backend == "postgres":
        [(definition,)] = execute_sql(
            database_url,
            "SELECT indexdef FROM pg_indexes WHERE schemaname = current_schema() AND indexname = 'tidegate_events_run'",
        )
        assert definition.endswith("(run_id)"), definition
    else:
        columns = execute_sql(database_url, "SELECT name FROM pragma_index_info('tidegate_events_run')")
        assert columns == [("run_id",)]


def test_a_runs_events_are_read_through_the_index_oldest_first(store: Store, database_url: str, backend: str) -> None:
    _fill(database_url, backend)
    run_id = "0" * 25 + "7"
    events = store.run_events(run_id)
    assert len(events) == EVENTS_PER_RUN
    assert [event.id for event in events] == sorted(event.id for event in events)
    read = "SELECT id, run_id, step_key, type, metadata, at FROM tidegate_event_log WHERE run_id = ? ORDER BY id"
    explain = "EXPLAIN " if backend == "postgres" else "EXPLAIN QUERY PLAN "
    plan = execute_sql(database_url, explain + read, (run_id,))
    text = "\n".join(str(line) for line in plan)
    assert "tidegate_events_run" in text, text


def test_postgres_keeps_a_runs_entries_deduplicated(store: Store, database_url: str, backend: str) -> None:
    """The index's bytes per run, built as a drain builds it (interleaved inserts, no REINDEX):
    about 360 for four separate (run_id, id) entries, about 110 for one key and a posting list
    of four row pointers (both measured on PostgreSQL 15). The bound sits between the two."""
    if backend != "postgres":
        pytest.skip("SQLite keeps one entry per event whatever the key: nothing to deduplicate")
    _fill(database_url, backend)
    [(size,)] = execute_sql(database_url, "SELECT pg_relation_size('tidegate_events_run')")
    assert size / RUNS < 180, f"{size / RUNS:.0f} bytes per run: the entries are not deduplicated"
