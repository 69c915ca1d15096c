"""What both dialects share when a trigger stores children and a parent starts to wait.

The rules are the domain's (`domain/children.py`: the replay check;
`domain/waits.py`: which slots a waiting parent releases or keeps, and the
waits that would deadlock); this module only turns rows into their inputs,
so that SQLite and PostgreSQL decide alike.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tidegate.domain import events as history
from tidegate.domain.children import ChildRecord, NewChild, check_replay, unfinished_awaited
from tidegate.domain.model import RunStatus
from tidegate.domain.scopes import Rules
from tidegate.domain.wait_graph import Blocked, refuse_stuck_wait
from tidegate.domain.waits import Slot, Waiter, WaitPlan, plan_wait

Row = Any  # a row read by name: a dict (PostgreSQL) or an sqlite3.Row, which is no Mapping
ToJSON = Callable[[Any], Any]


def child_record(row: Row, to_json: ToJSON) -> ChildRecord:
    return ChildRecord(
        id=row["id"],
        index=row["child_index"],
        task=row["task"],
        queue=row["queue"],
        args=to_json(row["args"]),
        status=RunStatus(row["status"]),
        awaited=bool(row["awaited"]),
        result=to_json(row["result"]),
        error=row["error"],
        linked=bool(row["linked"]),
    )


def record_start(parent: Row) -> bool:
    """Whether a trigger records its attempt's start (`parent` read by `trigger_children`).

    A worker reports a start with its next turn, while the attempt's code already runs and may
    trigger: a wait ends the attempt at once, and the start reported after it would match no
    running attempt and be dropped, leaving an attempt that ran without its RunStarted (the
    run's story, the intervals replayed from events). So a trigger that finds the start not
    recorded yet (`started_at` unset: every claim unsets it) records it first, in its own
    transaction and ahead of its events; the turn's report then finds it set and adds nothing.
    """
    return bool(parent["unstarted"])


def queued_child(child: NewChild) -> ChildRecord:
    """A child a trigger stores: what its parent learns of it (queued, no result yet)."""
    run = child.run
    return ChildRecord(run.id, child.index, run.task, run.queue, run.args, RunStatus.QUEUED, child.awaited)


def sort_new(children: Sequence[NewChild], existing: Mapping[int, ChildRecord]) -> tuple[list[NewChild], list[int]]:
    """Split a trigger's children into those to store and the positions already stored that it
    now awaits; raises NonDeterministicReplay when a stored one is not the call asked for."""
    new: list[NewChild] = []
    now_awaited: list[int] = []
    for child in children:
        stored = existing.get(child.index)
        if stored is None:
            new.append(child)
            continue
        check_replay(stored, child.run)
        if child.awaited and not stored.awaited:
            now_awaited.append(child.index)
    return new, now_awaited


def waited_on(asked: Sequence[ChildRecord], wait: bool, wait_any: bool) -> list[ChildRecord]:
    """The children a trigger's wait is on (`asked`, each awaited when it waits): those unfinished.
    A wait on any of them (`wait_any`) is no wait once one has ended: the caller goes on at once."""
    pending = unfinished_awaited(asked) if wait else []
    if wait_any and len(pending) < len(asked):
        return []
    return pending


def wait_remaining(existing: Mapping[int, ChildRecord], asked: Sequence[ChildRecord], wait_any: bool) -> int | None:
    """How many awaited children may still be unfinished when the waiting parent is queued again
    (`resume_parents`): None, read as 0, for a wait on all of them; for a wait on any, one less
    than are unfinished now (every child stored, as this trigger leaves them). A waiting parent
    triggers nothing, so that count only falls: the first end among them resumes it."""
    if not wait_any:
        return None
    children = {**existing, **{record.index: record for record in asked}}
    return len(unfinished_awaited(list(children.values()))) - 1


Shape = tuple[str, str, Mapping[str, str]]  # what decides a run's scopes: its queue, partition and tags


def shapes_of(rows: Sequence[Row], to_json: ToJSON) -> dict[str, Shape]:
    """The shape of each stored child (rows of `run_children`), by id."""
    return {row["id"]: (row["queue"], row["partition_key"], to_json(row["tags"]) or {}) for row in rows}


def waited_shapes(pending: Sequence[ChildRecord], new: Sequence[NewChild], stored: Mapping[str, Shape]) -> list[Shape]:
    """The shapes of the children a wait is on: a child this trigger stores is known from its run
    (no read), one stored before from its row."""
    fresh = {child.run.id: (child.run.queue, child.run.partition, child.run.tags) for child in new}
    return [fresh[child.id] if child.id in fresh else stored[child.id] for child in pending]


def slots_of(rules: Rules, queue: str, partition: str, tags: Mapping[str, str]) -> list[Slot]:
    """The run-level scopes a run occupies while running, with their limits now."""
    return [Slot(need.key, need.limit) for need in rules.scopes_for(queue, partition, tags)]


def held_slots(rules: Rules, parent: Row, held: Sequence[str], tags: Mapping[str, str]) -> list[Slot]:
    """The parent's slots: the scopes it holds (its holder rows), each with its limit now."""
    limits = {slot.scope: slot.limit for slot in slots_of(rules, parent["queue"], parent["partition_key"], tags)}
    return [Slot(scope, limits.get(scope)) for scope in sorted(held)]


def ancestors(parent: Row, above: Sequence[Row], to_json: ToJSON) -> list[Waiter]:
    """The waiting chain above the parent, root first, from the runs above it (nearest first):
    each run waiting on the one below it.

    A link the upper run does not await (a fire-and-forget child) ends the chain: that run
    resumes whatever its subtree does, so what it keeps cannot deadlock this wait.
    """
    chain: list[Waiter] = []
    below = parent
    for row in above:
        if row["id"] != below["parent_id"] or not below["awaited"] or row["status"] != RunStatus.WAITING.value:
            break
        kept = frozenset(to_json(row["wait_kept"]) or [])
        chain.append(Waiter(row["id"], kept, frozenset(to_json(row["wait_released"]) or [])))
        below = row
    chain.reverse()
    return chain


def plan(
    rules: Rules,
    parent: Row,
    parent_tags: Mapping[str, str],
    held: Sequence[str],
    waited_on: Sequence[Shape],
    chain: Sequence[Waiter],
    release_all: bool,
) -> WaitPlan:
    """The parent's wait on `waited_on` (each child's queue, partition and tags), or the deadlock error."""
    children = [slots_of(rules, queue, partition, tags) for queue, partition, tags in waited_on]
    return plan_wait(parent["id"], held_slots(rules, parent, held, parent_tags), children, chain, release_all)


def canceled_event(canceled: str, run_id: str, parent_id: str | None) -> history.Event:
    """The event of a run a cancel ended: the one asked for, or a child canceled with it."""
    if run_id == canceled or parent_id is None:
        return history.canceled_while_queued()
    return history.canceled_with_parent(parent_id)


def refuse_stuck(parent_id: str, rows: Sequence[Row], rules: Rules, to_json: ToJSON) -> None:
    """WaitDeadlock if the parent, its wait applied, could never end: `domain.wait_graph` over
    the blocked runs (`rows`: every waiting run and every queued child a waiting run awaits,
    read after the wait was written). A waiting run needs again what it released; a queued
    one needs all its scopes; running children are left out: they end. A run awaited through
    links (a unique child's holder, awaited by parents that did not store it) comes once per
    parent: each row is an edge, the first one the run."""
    ids = {row["id"] for row in rows}
    awaits: dict[str, set[str]] = {}
    for row in rows:
        if row["awaited"] and row["parent_id"] in ids:
            awaits.setdefault(row["parent_id"], set()).add(row["id"])
    limits: dict[str, int | None] = {}
    blocked = []
    for row in {row["id"]: row for row in reversed(rows)}.values():
        scopes = slots_of(rules, row["queue"], row["partition_key"], to_json(row["tags"]) or {})
        limits.update((slot.scope, slot.limit) for slot in scopes)
        waits = row["status"] == RunStatus.WAITING.value
        kept = frozenset(to_json(row["wait_kept"]) or []) if waits else frozenset()
        needs = frozenset(slot.scope for slot in scopes) - kept
        blocked.append(Blocked(row["id"], kept, needs, frozenset(awaits.get(row["id"], ()))))
    refuse_stuck_wait(parent_id, blocked, limits)
