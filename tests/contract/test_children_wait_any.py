"""A wait on any of its children (`trigger_children(..., wait_any=True)`), the same on both
adapters: a workflow's sliding window of children (wf.map_children) waits so, and is queued
again by the first awaited child to end, not the last; a wait on all is unchanged."""

from __future__ import annotations

import pytest

from tidegate import Concurrency, RecursiveWaitDeadlock, RunStatus
from tidegate.domain.children import TriggerRequest
from tidegate.domain.limits import QueueConfig
from tidegate.domain.model import CycleRequest

from .conftest import QUEUE, claim, completed, execute_sql
from .test_children_contract import OTHER, child, running_parent, types


def _end_one(store) -> str:
    (kid,) = claim(store, "w2", queues=[OTHER])
    store.cycle(CycleRequest("w2", [OTHER], [], [completed(kid.fence, result=kid.id)], 0, 30.0))
    return kid.id


def test_the_first_child_to_end_queues_the_parent_again(store):
    parent = running_parent(store)
    answer = store.trigger_children(
        TriggerRequest(parent.fence, "w1", [child(0), child(1), child(2)], True, False, True)
    )
    assert answer.waiting and store.get_run(parent.id).status is RunStatus.WAITING
    first = _end_one(store)
    assert store.get_run(parent.id).status is RunStatus.QUEUED and types(store, parent.id)[-1] == "RunResumed"

    # The replay finds one ended: a wait on any of those is no wait at all.
    (again,) = claim(store, "w1")
    replay = store.trigger_children(
        TriggerRequest(again.fence, "w1", [child(0), child(1), child(2)], True, False, True)
    )
    assert not replay.waiting and [c.id for c in replay.children if c.finished] == [first]
    # On the two left, it waits again, and the next end (not the last) resumes it.
    left = [child(i) for i, c in enumerate(replay.children) if not c.finished]
    assert store.trigger_children(TriggerRequest(again.fence, "w1", left, True, False, True)).waiting
    _end_one(store)
    assert store.get_run(parent.id).status is RunStatus.QUEUED
    assert sum(1 for c in store.run_children(parent.id) if not c.finished) == 1
    assert len(store.run_children(parent.id)) == 3  # none stored twice


def test_a_wait_on_all_still_waits_for_the_last_child(store):
    parent = running_parent(store)
    store.trigger_children(TriggerRequest(parent.fence, "w1", [child(0), child(1)], True, False))
    _end_one(store)
    assert store.get_run(parent.id).status is RunStatus.WAITING
    _end_one(store)
    assert store.get_run(parent.id).status is RunStatus.QUEUED


def test_the_sweep_resumes_a_parent_waiting_on_any_when_one_ended_by_any_path(store, database_url):
    parent = running_parent(store)
    answer = store.trigger_children(TriggerRequest(parent.fence, "w1", [child(0), child(1)], True, False, True))
    execute_sql(database_url, "UPDATE tidegate_runs SET status = 'completed' WHERE id = ?", (answer.children[1].id,))
    report = store.sweep("sweeper", 1.0)
    assert report is not None and report.resumed == [parent.id]
    assert store.get_run(parent.id).status is RunStatus.QUEUED


def test_a_wait_on_any_is_checked_for_deadlocks_like_any_wait(store):
    store.register_limits(None, [QueueConfig(QUEUE, Concurrency(global_limit=1))], [])
    parent = running_parent(store)
    store.trigger_children(TriggerRequest(parent.fence, "w1", [child(0, QUEUE)], True, False, True))
    (kid,) = claim(store, "w2")
    with pytest.raises(RecursiveWaitDeadlock):
        store.trigger_children(TriggerRequest(kid.fence, "w2", [child(0, QUEUE), child(1, QUEUE)], True, False, True))
    assert store.run_children(kid.id) == [] and store.get_run(kid.id).status is RunStatus.RUNNING
