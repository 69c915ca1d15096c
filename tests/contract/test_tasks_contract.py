"""Task defaults through the Store port: registered by one process, read by name by another."""

from __future__ import annotations

from tidegate.bootstrap import open_store
from tidegate.domain.model import TaskDefinition


def test_a_registered_task_reads_back_with_every_default(store):
    full = TaskDefinition(
        name="t.full",
        queue="q1",
        priority=7,
        tags={"team": "data", "tier": "gold"},
        max_attempts=4,
        retry_backoff=2.5,
        timeout=30.0,
        dispatch_deadline=120.0,
    )
    bare = TaskDefinition(name="t.bare", queue="q2")
    store.register_tasks([full, bare])
    assert store.get_task("t.full") == full
    assert store.get_task("t.bare") == bare


def test_an_unknown_task_is_none(store):
    assert store.get_task("t.unknown") is None
    store.register_tasks([])
    assert store.get_task("t.unknown") is None


def test_registering_again_replaces_the_defaults(store):
    store.register_tasks([TaskDefinition(name="t.x", queue="q1", max_attempts=2, timeout=5.0)])
    changed = TaskDefinition(name="t.x", queue="q2", priority=3, max_attempts=6)
    store.register_tasks([changed])
    assert store.get_task("t.x") == changed


def test_tasks_registered_through_one_store_are_seen_through_another(store, database_url):
    store.register_tasks([TaskDefinition(name="t.shared", queue="q", max_attempts=3)])
    other = open_store(database_url)
    try:
        assert other.get_task("t.shared") == TaskDefinition(name="t.shared", queue="q", max_attempts=3)
    finally:
        other.close()
