"""Task defaults and parameters through the Store port: registered by one process, read by name by another;
the list of tasks with the worker that last registered each."""

from __future__ import annotations

import pytest

from tidegate.bootstrap import open_store
from tidegate.domain.model import TaskDefinition
from tidegate.domain.parameters import describe


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


def _add(x: int, y: int = 2, *, note: str | None = None) -> int:
    return x + y


ADD = TaskDefinition(name="t.add", queue="q", parameters=describe(_add))


def test_a_task_reads_back_with_its_parameters(store):
    store.register_tasks([ADD, TaskDefinition(name="t.undescribed", queue="q")])
    assert store.get_task("t.add") == ADD
    assert store.get_task("t.add").parameters.text() == "x: int, y: int = 2, *, note: str | None = None"
    assert store.get_task("t.undescribed").parameters is None  # registered without: not checked


def test_registering_again_replaces_the_parameters(store):
    store.register_tasks([ADD])
    changed = TaskDefinition(name="t.add", queue="q", parameters=describe(lambda x, z: None))
    store.register_tasks([changed])
    assert store.get_task("t.add") == changed


def test_the_list_of_tasks_names_every_task_in_order(store):
    assert store.list_tasks() == []
    store.register_tasks([TaskDefinition(name="t.b", queue="q2"), ADD])
    listed = store.list_tasks()
    assert [registration.definition for registration in listed] == [ADD, TaskDefinition(name="t.b", queue="q2")]
    assert all(registration.worker_id is None and registration.worker_seen_at is None for registration in listed)


@pytest.mark.advances_clock
def test_the_list_keeps_the_worker_that_last_registered_a_task_and_when(store, clock):
    store.register_tasks([ADD], "worker-1")
    [first] = store.list_tasks()
    assert first.worker_id == "worker-1"
    assert first.worker_seen_at == first.updated_at
    assert abs(first.updated_at.timestamp() - clock.wall()) < 60

    clock.advance(600)
    store.register_tasks([ADD])  # a submitter or a server: the last worker stays
    [second] = store.list_tasks()
    assert (second.worker_id, second.worker_seen_at) == ("worker-1", first.worker_seen_at)
    assert second.updated_at.timestamp() - first.updated_at.timestamp() >= 600

    clock.advance(600)
    store.register_tasks([ADD], "worker-2")
    [third] = store.list_tasks()
    assert third.worker_id == "worker-2"
    assert third.worker_seen_at == third.updated_at
    assert third.worker_seen_at.timestamp() - first.worker_seen_at.timestamp() >= 1200
