"""The hot events' attempt and worker in columns of their own on PostgreSQL (migration 0026), and
every event read back whole through `tidegate_event_log` on both backends.

Why it matters is bytes: `{"worker": ..., "attempt": 1}` took 61 of a `RunDequeued` row's 144
bytes as jsonb (docs/postgres-scale.md). The events contract (domain/events.py, pinned by
test_events_pinned.py) is what a reader sees, so the storage shape is pinned here: a writer that put
the keys back into `metadata` (or stored an empty one as '{}') would pass every reading test and lose
the bytes.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.conftest import execute_sql
from tidegate.domain import events as history
from tidegate.domain.model import CycleRequest, Outcome, OutcomeKind

from .conftest import LEASE
from .test_transitions_pinned import new_runs

HOT = ("RunDequeued", "RunStarted", "RunCompleted")


def _decoded(metadata: Any) -> dict[str, Any]:
    return json.loads(metadata) if isinstance(metadata, str) else metadata


def _drained(store: Any) -> str:
    """One run queued, claimed, started and completed by worker w-cols, as a drain does it."""
    [run] = new_runs("cols", 1)
    store.enqueue([run])
    [claimed] = store.cycle(CycleRequest("w-cols", ["cols"], [], [], 1, LEASE)).claimed
    done = Outcome(run.id, claimed.attempt, OutcomeKind.COMPLETED, result=None)
    store.cycle(CycleRequest("w-cols", ["cols"], [claimed.fence], [done], 0, LEASE))
    return run.id


def test_postgres_stores_the_hot_events_attempt_and_worker_in_columns(store, database_url, backend):
    if backend != "postgres":
        pytest.skip("SQLite keeps every event's whole metadata in the table (its bytes met the aim already)")
    run_id = _drained(store)
    rows = execute_sql(
        database_url,
        "SELECT type, attempt, worker, metadata FROM tidegate_events"
        " WHERE run_id = ? AND type IN (?, ?, ?) ORDER BY id",
        (run_id, *HOT),
    )
    assert [(kind, attempt, worker) for kind, attempt, worker, _ in rows] == [
        ("RunDequeued", 1, "w-cols"),
        ("RunStarted", 1, "w-cols"),
        ("RunCompleted", 1, None),
    ]
    assert [metadata for *_, metadata in rows] == [None, None, None]  # nothing left: stored as NULL, not '{}'


def test_the_event_log_gives_every_event_its_whole_metadata(store, database_url, backend):
    """The hot events as the domain functions build them, and an event stored with the keys still in
    `metadata` (as every row before 0026 and every other writer has them) unchanged, through the view
    and through the store's reads."""
    run_id = _drained(store)
    other = history.attempt_ended("failed", 3, "lost", None)
    execute_sql(
        database_url,
        "INSERT INTO tidegate_events (run_id, type, metadata, at) VALUES (?, ?, ?, "
        + ("now())" if backend == "postgres" else "0)"),
        (run_id, other.type, json.dumps(other.metadata)),
    )
    rows = execute_sql(
        database_url, "SELECT type, metadata FROM tidegate_event_log WHERE run_id = ? ORDER BY id", (run_id,)
    )
    expected = [
        history.run_queued("cols"),
        history.run_dequeued(1, "w-cols"),
        history.run_started(1, "w-cols"),
        history.attempt_ended("completed", 1, None, None),
        other,
    ]
    assert [history.Event(kind, _decoded(metadata)) for kind, metadata in rows] == expected
    assert [history.Event(event.type, event.metadata) for event in store.run_events(run_id)] == expected
    streamed = [event for event in store.events_after(0, 100) if event.run_id == run_id]
    assert [history.Event(event.type, event.metadata) for event in streamed] == expected
    [latest] = store.latest_events("RunCompleted", 1)
    assert history.Event(latest.type, latest.metadata) == history.attempt_ended("completed", 1, None, None)
