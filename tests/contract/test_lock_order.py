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

import re

import pytest

from tests import races
from tidegate import RunStatus
from tidegate.domain.children import NewChild, TriggerRequest
from tidegate.domain.model import CycleRequest, Outcome, OutcomeKind
from tidegate.storage.shared import waiting
from tidegate.storage.shared.sqlfile import load_queries

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
    (stored,) = store.trigger_children(
        TriggerRequest(parent.fence, "w1", [_child(awaited=False)], False, False)
    ).children
    assert not stored.awaited
    (kid,) = claim(store, "w2", queues=["qb"])

    races.track(store, begin_immediate=not (removed and backend == "sqlite"))
    if removed and backend == "postgres":
        races.remove_query(store, "trigger_children_lock_children")
    monkeypatch.setattr(waiting, "sort_new", races.seam_after(waiting.sort_new))
    ended = Outcome(kid.id, kid.attempt, OutcomeKind.COMPLETED, result=1)
    first = races.Party(
        "wait", lambda: store.trigger_children(TriggerRequest(parent.fence, "w1", [_child(awaited=True)], True, False))
    )
    second = races.Party("end", lambda: store.cycle(CycleRequest("w2", ["qb"], [], [ended], 0, 30.0)))
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


# Every PostgreSQL statement that waits for locks on run rows, and why its order cannot close a
# circle: one run (by its id), or many in the one order (deeper first, then id). A new statement
# that locks runs fails here until it is placed in one of these.
ONE_RUN = {
    "trigger_children": "the parent's row, after the children it may turn awaited",
    "retry_run_lock": "the run an operator retries",
    "step_fence": "the run whose step is written (shared)",
    "hand_on_holders": "the run whose step slots move (shared)",
    "renew_slots": "the run whose pool slots are renewed (shared)",
    "release_slots": "the run whose pool slots go (shared)",
    "record_steps": "the run whose steps are recorded (shared)",
    "report_cost_charge": "the running attempt whose rate charge is corrected (then its rate states, as claims)",
}
MANY_RUNS = {
    "trigger_children_lock_children",
    "trigger_children_lock_holders",
    "resume_parents_lock",
    "resume_parents",
    "cancel_run_tree_lock",
    "cycle_reports",
    "renew_leases",
    "hand_back",
    "set_queue_paused_deadlines",
}
OTHER_ROWS = {
    "next_map_item": "a step row (the run is only read)",
    "take_rate_charge": "a step row, after its rates' scope rows as every step claim (the run is only read)",
    "enqueue_free": "the rules version row, shared (its runs are only inserted: no other transaction holds them)",
    "enqueue_unique_free": "the rules version row, shared, as enqueue_free (the keys' holders are only read)",
}
_LOCK = re.compile(r"\bFOR (?:UPDATE|SHARE)(?: OF \w+)?( SKIP LOCKED| NOWAIT)?")
_RUN_ORDER = re.compile(r"ORDER BY (?:\w+\.)?depth DESC, (?:\w+\.)?id\s+FOR UPDATE")


def _locking_runs() -> dict[str, str]:
    """The PostgreSQL blocks that wait for a lock and name the runs table (comments left out)."""
    blocks = {}
    for name, body in load_queries("tidegate.storage.postgres").items():
        sql = "\n".join(line for line in body.splitlines() if not line.lstrip().startswith("--"))
        waits = any(not lock.group(1) for lock in _LOCK.finditer(sql))
        if "tidegate_runs" in sql and waits and name not in OTHER_ROWS:
            blocks[name] = sql
    return blocks


def test_every_statement_that_locks_runs_is_placed_in_the_lock_order():
    assert set(_locking_runs()) == set(ONE_RUN) | MANY_RUNS


@pytest.mark.parametrize("name", sorted(MANY_RUNS))
def test_statements_that_lock_many_runs_lock_deeper_rows_first_then_by_id(name):
    assert _RUN_ORDER.search(_locking_runs()[name]), f"{name} must lock ORDER BY depth DESC, id"
