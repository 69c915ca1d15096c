"""PostgreSQL children: a trigger (children stored, the parent's wait), resumes, and cancels of a tree.

The lock order, the same on every path that takes more than one of these locks
(so no two transactions can wait on each other in a circle):

1. the waits lock (`trigger_children_lock[_shared]`), by a trigger that may wait, before any row;
   then the unique keys' locks (`unique_lock`, in key order), by a trigger of unique children,
   as by a keyed submit (whose later locks, run rows and admission's, come in this order too);
2. run rows, a child's before its parent's: a statement that locks several orders them
   `depth DESC, id` (the cycle's reports, lease renewals, hand-backs, a cancel's tree, a paused
   queue's deadlines, the resume of waiting parents, which the sweep's backstop runs for every
   waiting run at once); a trigger locks the stored children it may turn awaited
   (`trigger_children_lock_children`) before its parent's row, then the holders of its unique
   children's keys with its parent's row (`trigger_children_lock_holders`, deeper first: a
   holder may be linked to, child_links.py, and sit anywhere, so a holder deeper than those
   children is locked after them, out of the depth order); a run's end (the cycle) has locked
   the child's row by updating it, then locks its parent's (`resume_parents_lock`);
3. then the admission locks (`admission.py`), taken by a trigger that stores children, and the
   scope rows (in key order) of a claim (what it may lock out of that order, and how, in
   claim_scopes.py).

`tests/contract/test_lock_order.py` pins every statement that waits for run locks to this
order. What it does not order: a cycle that ends runs of several levels locks them deeper
first, then the parents it may resume, which may be deeper than a run it ended (a root and a
grandchild of one worker ending in one cycle). A transaction caught in a circle there is
failed by PostgreSQL's deadlock check, never left hanging (a cycle puts its reports back and
tries again; a cancel or a trigger raises).

Why the parent's row at all: either the trigger commits first and the end sees
the parent waiting, or the end commits first and the trigger reads the child
ended. Before this order, a replay that awaited a fire-and-forget child locked
the parent, then the child, and deadlocked with that child's end (the race in
test_lock_order.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import psycopg
from psycopg.rows import dict_row

from tidegate.domain import events as history
from tidegate.domain.children import ChildRecord, NewChild, TriggerAnswer, TriggerRequest
from tidegate.domain.errors import AttemptFencedOut, RunNotFound
from tidegate.domain.integers import STORED_INT_MAX
from tidegate.domain.jsonvalue import dumps
from tidegate.domain.model import RunStatus
from tidegate.domain.scopes import Rules
from tidegate.storage import port
from tidegate.storage.postgres.admission import refuse_past_ceilings
from tidegate.storage.postgres.database import Aggregate, Database
from tidegate.storage.postgres.limits import Limits
from tidegate.storage.postgres.payloads import event_params, payload_json, to_json
from tidegate.storage.postgres.pipeline import roll_back, send_wake
from tidegate.storage.shared import child_links, records, waiting, wakes
from tidegate.storage.shared.child_links import KeyedChildren
from tidegate.storage.shared.uniqueness import key_rows, replace_params

READ_COMMITTED = b"BEGIN ISOLATION LEVEL READ COMMITTED"


class _KeepsSlots(Exception):
    """The wait keeps a slot, or waits on a linked child (which may close a circle of waits): it
    must be decided alone (the exclusive waits lock), so the trigger is rolled back and made again
    under that lock, which is taken before anything is read."""


class Children(Aggregate, port.ChildVerbs):
    """The child verbs of the storage port, and the resume every end of a run may cause."""

    def __init__(self, db: Database, limits: Limits) -> None:
        super().__init__(db)
        self._limits = limits

    def trigger_children(self, request: TriggerRequest) -> TriggerAnswer:
        """Two round trips for a wait that keeps no slot (the common case), one more to check the
        wait graph when some waiting run keeps a slot, and a second try, under the exclusive waits
        lock, for a wait that keeps one itself (`_KeepsSlots`)."""
        try:
            return self._trigger(request, keeping=False)
        except _KeepsSlots:
            return self._trigger(request, keeping=True)

    def _trigger(self, request: TriggerRequest, keeping: bool) -> TriggerAnswer:
        """One pipelined transaction. The first batch takes the waits lock (for a wait), locks and
        reads the parent, and reads everything a trigger and `plan_wait` decide on: the rules, the
        children stored, the parent's holders, its waiting chain, whether any waiting run keeps a
        slot. The second stores the children, ends the attempt waiting, and commits; a wait is
        checked against the blocked runs before the commit only when some run keeps a slot (with
        none, no scope is held by a run that cannot go on, so no wait can deadlock)."""
        run_id, attempt = request.fence
        worker_id, children, wait = request.worker_id, request.children, request.wait
        with self._connection() as connection, connection.pipeline(), _transaction(connection):
            cursor = connection.cursor(row_factory=dict_row)
            if wait:
                connection.execute(self._q("trigger_children_lock" if keeping else "trigger_children_lock_shared"))
            sort_keyed = self._lock_ahead(connection, run_id, children)
            cached = self._limits.cached
            rules_cursor = connection.execute(self._q("load_rules"), {"known": None if cached is None else cached[0]})
            parent_cursor = connection.cursor(row_factory=dict_row).execute(
                self._q("trigger_children"), {"id": run_id, "attempt": attempt, "worker": worker_id}
            )
            stored_cursor = connection.cursor(row_factory=dict_row).execute(self._q("run_children"), {"parent": run_id})
            if wait:
                held_cursor = connection.execute(self._q("trigger_children_held"), {"id": run_id})
                chain_cursor = connection.cursor(row_factory=dict_row).execute(
                    self._q("trigger_children_chain"), {"id": run_id}
                )
                keepers_cursor = connection.execute(self._q("trigger_children_keepers"))
            parent = parent_cursor.fetchone()  # the first round trip
            stored = stored_cursor.fetchall()
            rules = self._rules(connection, rules_cursor.fetchone())
            if parent is None:
                raise AttemptFencedOut(f"run {run_id} attempt {attempt} is no longer running here: trigger refused")
            if parent["cancel_requested"]:
                wakes.only_if(False)
                return TriggerAnswer([], canceled=True)
            existing = {row["child_index"]: waiting.child_record(row, to_json) for row in stored}
            new, now_awaited = waiting.sort_new(children, existing)
            keyed = sort_keyed(new)
            refuse_past_ceilings(connection, self._q, rules, [child.run.queue for child in keyed.store])
            events = self._start(connection, parent, worker_id) + self._store_new(connection, parent, keyed)
            if now_awaited:
                indexes = {"parent": run_id, "indexes": now_awaited}
                connection.execute(self._q("trigger_children_awaited"), indexes)
                connection.execute(self._q("trigger_children_awaited_links"), indexes)
            asked = [
                existing.get(child.index) or keyed.records.get(child.index) or waiting.queued_child(child)
                for child in children
            ]
            asked = [replace(record, awaited=record.awaited or wait) for record in asked]
            pending = waiting.waited_on(asked, wait, request.wait_any)
            if pending:
                chain = waiting.ancestors(parent, chain_cursor.fetchall(), to_json)
                held = [row[0] for row in held_cursor.fetchall()]
                known = {**waiting.shapes_of(stored, to_json), **keyed.shapes}
                shapes = waiting.waited_shapes(pending, keyed.store, known)
                plan = waiting.plan(rules, parent, parent["tags"] or {}, held, shapes, chain, request.release_all)
                linked = any(record.linked for record in pending)
                if (plan.kept or linked) and not keeping:
                    raise _KeepsSlots  # rolled back: tried again under the exclusive lock
                keepers = keepers_cursor.fetchone()
                remaining = waiting.wait_remaining(existing, asked, request.wait_any)
                self._wait(connection, parent, sorted(plan.kept), plan.released, remaining)
                if keeping or (keepers is not None and keepers[0]):
                    blocked = cursor.execute(self._q("trigger_children_blocked"), {"every": linked}).fetchall()
                    waiting.refuse_stuck(parent["id"], blocked, rules, to_json)  # across chains, the wait applied
                waited = history.run_waiting(attempt, [child.id for child in pending], plan.released, plan.kept)
                events.append((run_id, waited))
            connection.execute(self._q("trigger_children_events"), {"events": _events_json(events)})
        return TriggerAnswer(asked, waiting=bool(pending))

    def _lock_ahead(
        self, connection: psycopg.Connection[Any], parent_id: str, children: Sequence[NewChild]
    ) -> Callable[[Sequence[NewChild]], KeyedChildren]:
        """Send what a trigger locks before its parent's row, in the module's lock order: its
        children's keys, the stored children it may turn awaited, the keys' holders (with the
        parent's row), then the holders' read. Return how the new children are sorted by them,
        once the batch has come back."""
        keys = child_links.child_keys(children)
        if keys:
            connection.execute(self._q("unique_lock"), {"keys": keys})
        awaiting = [child.index for child in children if child.awaited]
        if awaiting:
            connection.execute(self._q("trigger_children_lock_children"), {"parent": parent_id, "indexes": awaiting})
        if not keys:
            return child_links.unkeyed
        connection.execute(self._q("trigger_children_lock_holders"), {"keys": keys, "parent": parent_id})
        holders = connection.cursor(row_factory=dict_row).execute(self._q("trigger_children_holders"), {"keys": keys})
        return lambda new: child_links.sort_keyed(new, holders.fetchall(), to_json)

    def _rules(self, connection: psycopg.Connection[Any], row: Any) -> Rules:
        """The rules in force, read with the parent (the cached ones when their version holds)."""
        rules = self._limits.rules_from_row(row)
        if rules is None:  # the cache moved meanwhile: read them whole
            rules = self._limits.parse_rules(connection.execute(self._q("load_rules"), {"known": None}).fetchone())
        return rules

    def _start(
        self, connection: psycopg.Connection[Any], parent: dict[str, Any], worker_id: str
    ) -> list[tuple[str, history.Event]]:
        """The attempt's start, if no turn recorded it yet: the attempt may end waiting here, and
        a start reported after that would match no running attempt (`waiting.record_start`)."""
        if not waiting.record_start(parent):
            return []
        connection.execute(self._q("trigger_children_started"), {"id": parent["id"], "attempt": parent["attempt"]})
        return [(parent["id"], history.run_started(parent["attempt"], worker_id))]

    def _store_new(
        self, connection: psycopg.Connection[Any], parent: dict[str, Any], keyed: KeyedChildren
    ) -> list[tuple[str, history.Event]]:
        """The new children stored (with the keys they take), the holders they replace given
        their args, and the positions linked to a holder."""
        for holder_id, run in keyed.replace:  # the holder is locked and queued
            connection.execute(self._q("unique_replace"), {**replace_params(holder_id, run), "args": dumps(run.args)})
        events = []
        if keyed.links:
            links = payload_json(child_links.link_rows(keyed.links))
            connection.execute(self._q("trigger_children_link"), {"parent": parent["id"], "links": links})
            for child, holder in keyed.links:
                linked = history.child_triggered(holder, child.run.task, child.index, child.awaited, linked=True)
                events.append((parent["id"], linked))
        new = keyed.store
        if not new:
            return events
        rows = [
            {
                "n": index,
                **records.new_run_row(child.run),
                "child_index": child.index,
                "awaited": child.awaited,
                "on_parent_cancel": child.on_parent_cancel,
            }
            for index, child in enumerate(new)
        ]
        connection.execute(
            self._q("trigger_children_insert"),
            {
                "runs": payload_json(rows),
                "parent": parent["id"],
                "root": parent["root_id"] or parent["id"],
                "depth": parent["depth"] + 1,
            },
        )
        taken = key_rows([child.run for child in new])
        if taken:
            connection.execute(self._q("unique_take"), {"keys": payload_json(taken)})
        for child in new:
            run = child.run
            events.append((run.id, history.run_queued(run.queue)))
            events.append((parent["id"], history.child_triggered(run.id, run.task, child.index, child.awaited)))
        return events

    def _wait(
        self,
        connection: psycopg.Connection[Any],
        parent: dict[str, Any],
        kept: list[str],
        released: Any,
        remaining: int | None,
    ) -> None:
        """End the parent's attempt waiting: released slots (and its step slots) go, kept ones stay
        with no worker's lease."""
        connection.execute(
            self._q("trigger_children_wait"),
            {
                "id": parent["id"],
                "attempt": parent["attempt"],
                "kept": dumps(kept),
                "released": dumps(sorted(released)),
                "remaining": remaining,
                "most_attempts": STORED_INT_MAX,
            },
        )
        connection.execute(self._q("trigger_children_release"), {"id": parent["id"], "kept": kept})
        connection.execute(self._q("trigger_children_keep"), {"id": parent["id"]})

    def _event(self, connection: psycopg.Connection[Any], run_id: str, event: history.Event) -> None:
        connection.execute(self._q("insert_event"), event_params(run_id, event))

    def _children(self, connection: psycopg.Connection[Any], parent_id: str) -> dict[int, ChildRecord]:
        rows = connection.cursor(row_factory=dict_row).execute(self._q("run_children"), {"parent": parent_id})
        return {row["child_index"]: waiting.child_record(row, to_json) for row in rows.fetchall()}

    def run_children(self, run_id: str) -> list[ChildRecord]:
        with self._connection() as connection:
            return list(self._children(connection, run_id).values())

    def resume_parents(self, connection: psycopg.Connection[Any], ended: Sequence[str] | None) -> psycopg.Cursor[Any]:
        """Queue the resume of every waiting parent (of `ended`, or all when None) whose awaited
        children have all ended (or, for a wait on any, one more of them); the cursor's rows (their
        ids) arrive with the commit."""
        if ended is not None:
            connection.execute(self._q("resume_parents_lock"), {"ids": list(ended)})
        return connection.execute(self._q("resume_parents"), {"ids": None if ended is None else list(ended)})

    def cancel_run(self, run_id: str) -> RunStatus:
        """Cancel the run and its unfinished children linked to it: queued and waiting ones end
        now, running ones are asked (their workers end them); its waiting parent may resume."""
        with self._connection() as connection, _transaction(connection):
            tree = dict(connection.execute(self._q("cancel_run_tree"), {"id": run_id}).fetchall())
            if not tree:
                raise RunNotFound(f"no run with id {run_id!r}")
            connection.execute(self._q("cancel_run_tree_lock"), {"ids": list(tree)})
            # Read again under the locks: a trigger that committed meanwhile may have added children.
            tree = dict(connection.execute(self._q("cancel_run_tree"), {"id": run_id}).fetchall())
            connection.execute(self._q("cancel_run_tree_lock"), {"ids": list(tree)})
            ids = {"ids": list(tree)}
            ended = [row[0] for row in connection.execute(self._q("cancel_run_tree_queued"), ids).fetchall()]
            waited = [row[0] for row in connection.execute(self._q("cancel_run_waiting"), ids).fetchall()]
            connection.execute(self._q("cancel_run_waiting_holders"), {"ids": waited})
            connection.execute(self._q("cancel_run_requested"), ids)
            for node in ended + waited:
                self._event(connection, node, waiting.canceled_event(run_id, node, tree[node]))
            if run_id in ended or run_id in waited:
                self.resume_parents(connection, [run_id])
            status = connection.execute(self._q("run_status"), {"id": run_id}).fetchone()
        assert status is not None
        return RunStatus(status[0])


@contextmanager
def _transaction(connection: psycopg.Connection[Any]) -> Iterator[None]:
    """A READ COMMITTED transaction, whatever the server's default: each statement sees what
    committed before its locks were granted (inside a pipeline, the COMMIT rides with the last
    batch)."""
    try:
        connection.execute(READ_COMMITTED)
        yield
        send_wake(connection)
        connection.execute(b"COMMIT")
    except BaseException:
        roll_back(connection)
        raise


def _events_json(events: Sequence[tuple[str, history.Event]]) -> str:
    return payload_json(
        [
            {"n": n, "run_id": run_id, "type": event.type, "metadata": event.metadata}
            for n, (run_id, event) in enumerate(events)
        ]
    )
