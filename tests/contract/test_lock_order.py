"""The lock order of run rows (storage/postgres/children.py's docstring), proven by the deadlock it forbids.

A parent triggered a child fire and forget; its replay now waits on that child
(the stored child turns awaited) while the child ends. The trigger parks inside
its transaction, after it read the children; the child's end starts then. On
PostgreSQL an end locks the child's row (its outcome), then the parent's
(`resume_parents_lock`). With the order (children first), the trigger locked
the child before its parent (`trigger_children_lock_children`): the end waits
for it at the child's row, holding nothing of the trigger's, and then sees the
parent waiting and resumes it. Removed (the old order: parent, then the child
it marks awaited), the end holds the child and waits for the parent, the
trigger holds the parent and waits for the child: PostgreSQL breaks the
deadlock by failing one of them. On SQLite the single writer is the mechanism
(no two write transactions overlap, so there is no order to get wrong); its
mutation is a deferred BEGIN, as in test_serialization_waits.py.
"""

from __future__ import annotations

import pytest

from tests import races
from tidegate import RunStatus
from tidegate.domain.children import NewChild
from tidegate.domain.model import Outcome, OutcomeKind
from tidegate.storage import waiting

from .conftest import claim, enqueue_one, new_run

MUTATION = pytest.mark.parametrize("removed", [False, True], ids=["intact", "removed"])


def _child(awaited: bool) -> NewChild:
    return NewChild(new_run("qb", task="t.child", args={"i": 0}), 0, awaited)


@MUTATION
def test_a_replay_awaiting_a_fire_and_forget_child_and_that_childs_end_never_deadlock(
    store, database_url, backend, monkeypatch, removed
):
    enqueue_one(store)
    (parent,) = claim(store, "w1")
    (stored,) = store.trigger_children(parent.fence, "w1", [_child(awaited=False)], False, False).children
    assert not stored.awaited
    (kid,) = claim(store, "w2", queues=["qb"])

    races.track(store, begin_immediate=not (removed and backend == "sqlite"))
    if removed and backend == "postgres":
        races.remove_query(store, "trigger_children_lock_children")
    monkeypatch.setattr(waiting, "sort_new", races.seam_after(waiting.sort_new))
    ended = Outcome(kid.id, kid.attempt, OutcomeKind.COMPLETED, result=1)
    first = races.Party("wait", lambda: store.trigger_children(parent.fence, "w1", [_child(awaited=True)], True, False))
    second = races.Party("end", lambda: store.cycle("w2", ["qb"], [], [ended], 0, 30.0))
    race = races.Race(database_url)
    try:
        race.run(first, second)
    finally:
        race.close()

    status = store.get_run(parent.id).status
    (child,) = store.run_children(parent.id)
    violation = first.error is not None or second.error is not None or status is not RunStatus.QUEUED
    assert violation is removed, (status, first.error, second.error)
    if not removed:
        assert child.awaited and child.status is RunStatus.COMPLETED
        assert first.result.waiting  # it read the child running, waited, and the end resumed it
