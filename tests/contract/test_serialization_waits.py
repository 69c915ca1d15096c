"""The waits lock, proven by the race it forbids (issue 13: race-free under concurrent triggers).

Two sibling runs each start a wait that, together with the other's, closes a
cycle (c1 keeps queue qa and waits on a child needing qb; c2 keeps qb and
waits on a child needing qa). The first trigger parks after its deadlock
check, inside its transaction; with the mechanism (PostgreSQL: the advisory
lock `trigger_children_lock`; SQLite: BEGIN IMMEDIATE) the second waits,
then sees the first's wait and is refused with WaitDeadlock. Removed, the
second decides on a store without the first's wait and both are accepted
(or, on SQLite, the second fails on its stale snapshot): a violation.
"""

from __future__ import annotations

import pytest

from tests import races
from tidegate import Concurrency, RunStatus, WaitDeadlock
from tidegate.domain.children import NewChild, TriggerRequest
from tidegate.domain.limits import QueueConfig
from tidegate.domain.model import CycleRequest, Outcome, OutcomeKind
from tidegate.storage.shared import waiting

from .conftest import claim, enqueue_one, new_run

MUTATION = pytest.mark.parametrize("removed", [False, True], ids=["intact", "removed"])


def _child(index: int, queue: str) -> NewChild:
    return NewChild(new_run(queue, task="t.child", args={"i": index}), index, True)


@MUTATION
def test_two_waits_closing_a_cycle_together_are_never_both_accepted(store, database_url, backend, monkeypatch, removed):
    store.register_limits(
        None, [QueueConfig("qa", Concurrency(global_limit=1)), QueueConfig("qb", Concurrency(global_limit=1))], []
    )
    enqueue_one(store)
    (root,) = claim(store, "w1")
    store.trigger_children(TriggerRequest(root.fence, "w1", [_child(0, "qa"), _child(1, "qb")], True, False))
    claimed = {run.queue: run for run in claim(store, "w2", limit=2, queues=["qa", "qb"])}

    races.track(store, begin_immediate=not (removed and backend == "sqlite"))
    if removed and backend == "postgres":
        races.remove_query(store, "trigger_children_lock")
    monkeypatch.setattr(waiting, "refuse_stuck", races.seam_after(waiting.refuse_stuck))
    first = races.Party(
        "c1", lambda: store.trigger_children(TriggerRequest(claimed["qa"].fence, "w2", [_child(0, "qb")], True, False))
    )
    second = races.Party(
        "c2", lambda: store.trigger_children(TriggerRequest(claimed["qb"].fence, "w2", [_child(0, "qa")], True, False))
    )
    race = races.Race(database_url)
    try:
        race.run(first, second)
    finally:
        race.close()

    assert first.error is None, first.error
    violation = not isinstance(second.error, WaitDeadlock)
    assert violation is removed, (first.result, second.result, second.error)


@MUTATION
def test_a_wait_and_the_end_of_the_child_it_waits_for_never_miss_each_other(
    store, database_url, backend, monkeypatch, removed
):
    """The parent starts waiting on a child that ends meanwhile. The trigger parks after reading
    the child unfinished, holding its parent's row; the child's end must wait for it (PostgreSQL:
    `resume_parents_lock`), then see the parent waiting and resume it. Removed, the end sees the
    parent still running, resumes nothing, and the parent waits for good (until a sweep)."""
    enqueue_one(store)
    (parent,) = claim(store, "w1")
    (stored,) = store.trigger_children(TriggerRequest(parent.fence, "w1", [_child(0, "qb")], False, False)).children
    (kid,) = claim(store, "w2", queues=["qb"])

    races.track(store, begin_immediate=not (removed and backend == "sqlite"))
    if removed and backend == "postgres":
        races.remove_query(store, "resume_parents_lock")
    monkeypatch.setattr(waiting, "sort_new", races.seam_after(waiting.sort_new))
    ended = Outcome(kid.id, kid.attempt, OutcomeKind.COMPLETED, result=1)
    first = races.Party(
        "wait", lambda: store.trigger_children(TriggerRequest(parent.fence, "w1", [_child(0, "qb")], True, False))
    )
    second = races.Party("end", lambda: store.cycle(CycleRequest("w2", ["qb"], [], [ended], 0, 30.0)))
    race = races.Race(database_url)
    try:
        race.run(first, second)
    finally:
        race.close()

    status = store.get_run(parent.id).status
    violation = first.error is not None or second.error is not None or status is not RunStatus.QUEUED
    assert violation is removed, (status, first.error, second.error, stored.id)
