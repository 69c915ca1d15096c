"""Unique children in the store (issue 26): links, their serialisation, and what reads them.

A trigger whose child meets its key's holder stores a link (parent, position) -> holder; the
two locks that make it race-free are proven by the races they forbid (tests/races.py):

- the keys' locks (PostgreSQL `unique_lock`, SQLite BEGIN IMMEDIATE): two parents triggering one
  key at once store one run; removed, both read no holder and both store a run;
- the holder's row lock (PostgreSQL `trigger_children_lock_holders`, SQLite BEGIN
  IMMEDIATE): a parent starting to wait on a linked holder and that holder's end never miss each
  other; removed, the end commits unseen and the parent waits for good.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests import races
from tidegate import RunStatus, WaitCycle
from tidegate.domain.children import NewChild, TriggerRequest
from tidegate.domain.keys import ACTIVE_STATES, RunKey, compute_key
from tidegate.domain.model import CycleRequest, NewRun, Outcome, OutcomeKind
from tidegate.storage.shared import child_links

from .conftest import QUEUE, claim, completed, new_run

MUTATION = pytest.mark.parametrize("removed", [False, True], ids=["intact", "removed"])
KIDS = "kids"


def keyed_run(queue: str = KIDS, key: str = "k", **options) -> NewRun:
    claim_ = RunKey(compute_key("t.kid", "key", None, key), ACTIVE_STATES, None, "existing")
    return replace(new_run(queue, task="t.kid", args={"key": key}, **options), unique=claim_)


def keyed_child(index: int = 0, key: str = "k", awaited: bool = True) -> NewChild:
    return NewChild(keyed_run(key=key), index, awaited)


def running_parents(store, count: int):
    store.enqueue([new_run(QUEUE) for _ in range(count)])
    parents = claim(store, "w1", limit=count)
    assert len(parents) == count
    return parents


def kid_runs(store) -> list[str]:
    return [run.id for run in store.page_runs(limit=100) if run.task == "t.kid"]


def test_a_child_meeting_its_keys_holder_is_linked_to_it_and_the_holders_end_resumes_the_parent(store):
    (holder,) = store.enqueue_unique([keyed_run()])
    (parent,) = running_parents(store, 1)
    answer = store.trigger_children(TriggerRequest(parent.fence, "w1", [keyed_child()], True))
    assert answer.waiting and [(c.id, c.linked) for c in answer.children] == [(holder.run_id, True)]
    assert kid_runs(store) == [holder.run_id]
    (kid,) = claim(store, "w2", queues=[KIDS])
    assert kid.has_parent  # a keyed run may have been linked to: its end looks for parents
    store.cycle(CycleRequest("w2", [KIDS], [], [completed(kid.fence, result=7)], 0, 30.0))
    assert store.get_run(parent.id).status is RunStatus.QUEUED
    (replayed,) = store.run_children(parent.id)
    assert (replayed.id, replayed.linked, replayed.result, replayed.status) == (
        holder.run_id, True, 7, RunStatus.COMPLETED
    )  # fmt: skip


def test_a_plain_run_claims_with_no_parent_to_resume(store):
    store.enqueue([new_run(KIDS)])
    (run,) = claim(store, "w2", queues=[KIDS])
    assert not run.has_parent


def test_a_childs_key_is_taken_so_a_later_submit_finds_the_child(store):
    (parent,) = running_parents(store, 1)
    (stored,) = store.trigger_children(TriggerRequest(parent.fence, "w1", [keyed_child(awaited=False)])).children
    assert not stored.linked
    (answer,) = store.enqueue_unique([keyed_run()])
    assert answer.duplicate and answer.run_id == stored.id


def test_cancelling_a_linked_parent_leaves_the_holder(store):
    (holder,) = store.enqueue_unique([keyed_run()])
    (parent,) = running_parents(store, 1)
    store.trigger_children(TriggerRequest(parent.fence, "w1", [keyed_child()], True))
    assert store.cancel_run(parent.id) is RunStatus.CANCELED
    assert store.get_run(holder.run_id).status is RunStatus.QUEUED


def test_a_wait_on_a_run_that_waits_on_the_parent_is_a_wait_cycle_and_stores_nothing(store):
    """p1 holds key a and waits on key b's holder p2; p2 then waits on key a: a circle."""
    first, second = (replace(keyed_run(QUEUE, key=key), task="t.kid") for key in ("a", "b"))
    store.enqueue_unique([first, second])
    p1, p2 = claim(store, "w1", limit=2)
    by_id = {p1.id: p1, p2.id: p2}
    a, b = by_id[first.id], by_id[second.id]
    assert store.trigger_children(TriggerRequest(a.fence, "w1", [keyed_child(key="b")], True)).waiting
    with pytest.raises(WaitCycle) as raised:
        store.trigger_children(TriggerRequest(b.fence, "w1", [keyed_child(key="a")], True))
    assert raised.value.code == "WAIT_CYCLE" and b.id in raised.value.chain and a.id in raised.value.chain
    assert store.get_run(b.id).status is RunStatus.RUNNING and store.run_children(b.id) == []


def test_pruning_keeps_a_finished_holder_while_a_parent_linked_to_it_is_unfinished(store, clock):
    """The parent's replay reads the link, so its holder stays (as an own child does, issue 13)."""
    (holder,) = store.enqueue_unique([keyed_run()])
    (parent,) = running_parents(store, 1)
    store.trigger_children(TriggerRequest(parent.fence, "w1", [keyed_child(awaited=False)]))
    (kid,) = claim(store, "w2", queues=[KIDS])
    store.cycle(CycleRequest("w2", [KIDS], [], [completed(kid.fence, result=1)], 0, 30.0))
    clock.advance(3600)
    store.prune_runs(older_than=60, limit=100)
    assert store.get_run(holder.run_id) is not None
    assert [child.id for child in store.run_children(parent.id)] == [holder.run_id]
    store.cycle(CycleRequest("w1", [QUEUE], [], [completed(parent.fence)], 0, 30.0))
    clock.advance(3600)
    store.prune_runs(older_than=60, limit=100)
    assert store.get_run(holder.run_id) is None and store.get_run(parent.id) is None
    assert store.run_children(parent.id) == []  # its links went with it


@MUTATION
def test_two_parents_triggering_one_key_at_once_store_one_run(store, database_url, backend, monkeypatch, removed):
    first_parent, second_parent = running_parents(store, 2)
    races.track(store, begin_immediate=not (removed and backend == "sqlite"))
    if removed and backend == "postgres":
        races.remove_query(store, "unique_lock")
    monkeypatch.setattr(child_links, "sort_keyed", races.seam_after(child_links.sort_keyed))
    first = races.Party(
        "p1", lambda: store.trigger_children(TriggerRequest(first_parent.fence, "w1", [keyed_child(awaited=False)]))
    )
    second = races.Party(
        "p2", lambda: store.trigger_children(TriggerRequest(second_parent.fence, "w1", [keyed_child(awaited=False)]))
    )
    race = races.Race(database_url)
    try:
        race.run(first, second)
    finally:
        race.close()

    # removed on SQLite, whichever writes second fails on its stale snapshot
    violation = first.error is not None or second.error is not None or len(kid_runs(store)) != 1
    assert violation is removed, (kid_runs(store), first.error, second.error)
    if not removed:
        (linked,) = second.result.children
        assert linked.linked and linked.id == first.result.children[0].id


@MUTATION
def test_a_wait_on_a_linked_holder_and_the_holders_end_never_miss_each_other(
    store, database_url, backend, monkeypatch, removed
):
    """The trigger parks after reading the holder running (PostgreSQL: its row locked); the
    holder's end must wait for it, then find the link and resume the parent. Removed, the end
    commits first unseen, and the parent waits on a run that has ended. A wait on a linked run is
    decided under the exclusive waits lock, on PostgreSQL by a second try: the seam is that try's."""
    store.enqueue_unique([keyed_run()])
    (kid,) = claim(store, "w2", queues=[KIDS])
    (parent,) = running_parents(store, 1)
    races.track(store, begin_immediate=not (removed and backend == "sqlite"))
    if removed and backend == "postgres":
        races.remove_query(store, "trigger_children_lock_holders")
    tries: list[int] = []
    real = child_links.sort_keyed

    def sort_keyed(*args, **kwargs):
        keyed = real(*args, **kwargs)
        tries.append(1)
        if backend == "sqlite" or len(tries) == 2:
            races.park_here()
        return keyed

    monkeypatch.setattr(child_links, "sort_keyed", sort_keyed)
    ended = Outcome(kid.id, kid.attempt, OutcomeKind.COMPLETED, result=1)
    waits = TriggerRequest(parent.fence, "w1", [keyed_child()], True)
    first = races.Party("wait", lambda: store.trigger_children(waits))
    second = races.Party("end", lambda: store.cycle(CycleRequest("w2", [KIDS], [], [ended], 0, 30.0)))
    race = races.Race(database_url)
    try:
        race.run(first, second)
    finally:
        race.close()

    status = store.get_run(parent.id).status
    waits_on_an_end = status is RunStatus.WAITING and all(child.finished for child in store.run_children(parent.id))
    violation = first.error is not None or second.error is not None or waits_on_an_end
    assert violation is removed, (status, first.error, second.error)
    if not removed:
        assert status is RunStatus.QUEUED and store.run_children(parent.id)[0].id == kid.id
