"""SQLite children: a trigger (children stored, the parent's wait), resumes, and cancels of a tree.

Each verb is one `BEGIN IMMEDIATE` transaction: SQLite's single writer is what
makes the wait check race-free (no other trigger, claim or end changes the
chain or the holders it reads before the wait is written).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from tidegate.domain import events as history
from tidegate.domain.children import ChildRecord, NewChild, TriggerAnswer, TriggerRequest
from tidegate.domain.errors import AttemptFencedOut, RunNotFound
from tidegate.domain.integers import STORED_INT_MAX
from tidegate.domain.jsonvalue import dumps
from tidegate.domain.model import RunStatus
from tidegate.storage import port
from tidegate.storage.shared import child_links, records, waiting, wakes
from tidegate.storage.shared.child_links import KeyedChildren
from tidegate.storage.shared.uniqueness import key_rows, replace_params
from tidegate.storage.shared.waiting import canceled_event
from tidegate.storage.sqlite.database import Aggregate, Database
from tidegate.storage.sqlite.limits import Limits
from tidegate.storage.sqlite.payloads import event_row, to_json
from tidegate.storage.sqlite.runs import Runs

FOREVER = 253402300799.0  # 9999-12-31: a kept slot lasts until its run resumes or ends, not a lease


class Children(Aggregate, port.ChildVerbs):
    """The child verbs of the storage port, and the resume every end of a run may cause."""

    def __init__(self, db: Database, limits: Limits, runs: Runs) -> None:
        super().__init__(db)
        self._limits = limits
        self._runs = runs

    def trigger_children(self, request: TriggerRequest) -> TriggerAnswer:
        run_id, attempt = request.fence
        worker_id, children, wait = request.worker_id, request.children, request.wait
        with self._write() as (connection, now):
            parent = connection.execute(
                self._q("trigger_children"), {"id": run_id, "attempt": attempt, "worker": worker_id}
            ).fetchone()
            if parent is None:
                raise AttemptFencedOut(f"run {run_id} attempt {attempt} is no longer running here: trigger refused")
            if parent["cancel_requested"]:
                wakes.only_if(False)
                return TriggerAnswer([], canceled=True)
            stored = connection.execute(self._q("run_children"), {"parent": run_id}).fetchall()
            existing = {row["child_index"]: waiting.child_record(row, to_json) for row in stored}
            new, now_awaited = waiting.sort_new(children, existing)
            keyed = self._keyed(connection, new, now)
            events = self._start(connection, parent, worker_id, now) + self._store_new(connection, parent, keyed, now)
            if now_awaited:
                indexes = {"parent": run_id, "indexes": json.dumps(now_awaited)}
                connection.execute(self._q("trigger_children_awaited"), indexes)
                connection.execute(self._q("trigger_children_awaited_links"), indexes)
            asked = [
                existing.get(child.index) or keyed.records.get(child.index) or waiting.queued_child(child)
                for child in children
            ]
            asked = [replace(record, awaited=record.awaited or wait) for record in asked]
            pending = waiting.waited_on(asked, wait, request.wait_any)
            if pending:
                known = {**waiting.shapes_of(stored, to_json), **keyed.shapes}
                shapes = waiting.waited_shapes(pending, keyed.store, known)
                remaining = waiting.wait_remaining(existing, asked, request.wait_any)
                linked = any(record.linked for record in pending)
                wait_on = (pending, shapes, request.release_all, remaining, linked)
                events.append(self._wait(connection, parent, *wait_on, now))
            connection.executemany(self._q("insert_event"), events)
        return TriggerAnswer(asked, waiting=bool(pending))

    def _start(
        self, connection: sqlite3.Connection, parent: sqlite3.Row, worker_id: str, now: float
    ) -> list[dict[str, Any]]:
        """The attempt's start, if no turn recorded it yet (`waiting.record_start`)."""
        if not waiting.record_start(parent):
            return []
        fence = {"id": parent["id"], "attempt": parent["attempt"]}
        connection.execute(self._q("trigger_children_started"), {**fence, "now": now})
        return [event_row(parent["id"], history.run_started(parent["attempt"], worker_id), now)]

    def _keyed(self, connection: sqlite3.Connection, new: Sequence[NewChild], now: float) -> KeyedChildren:
        """The new children sorted by their keys (stored, or linked to their key's holder): the
        write lock held since the trigger began keeps the holders read here the holders."""
        keys = child_links.child_keys(new)
        if not keys:
            return child_links.unkeyed(new)
        rows = connection.execute(self._q("trigger_children_holders"), {"keys": json.dumps(keys), "now": now})
        keyed = child_links.sort_keyed(new, rows.fetchall(), to_json)
        for holder_id, run in keyed.replace:
            params = {**replace_params(holder_id, run), "args": dumps(run.args), "now": now}
            connection.execute(self._q("unique_replace"), params).fetchall()
        return keyed

    def _store_new(
        self, connection: sqlite3.Connection, parent: sqlite3.Row, keyed: KeyedChildren, now: float
    ) -> list[dict[str, Any]]:
        new = keyed.store
        if new:
            self._runs.check_admission(connection, [child.run.queue for child in new], now)  # a child is a submit
        rows = []
        events = []
        for child in new:
            run = child.run
            row = {**records.new_run_row(run), "args": dumps(run.args), "tags": dumps(run.tags), "now": now}
            row.update(
                parent_id=parent["id"],
                root_id=parent["root_id"] or parent["id"],
                depth=parent["depth"] + 1,
                child_index=child.index,
                awaited=int(child.awaited),
                on_parent_cancel=child.on_parent_cancel,
            )
            rows.append(row)
            events.append(event_row(run.id, history.run_queued(run.queue), now))
            events.append(
                event_row(parent["id"], history.child_triggered(run.id, run.task, child.index, child.awaited), now)
            )
        connection.executemany(self._q("trigger_children_insert"), rows)
        taken = key_rows([child.run for child in new])
        if taken:
            connection.executemany(self._q("unique_take"), [{**row, "now": now} for row in taken])
        links = child_links.link_rows(keyed.links)
        if links:
            link_params = [{**row, "parent": parent["id"], "args": dumps(row["args"])} for row in links]
            connection.executemany(self._q("trigger_children_link"), link_params)
        for child, holder in keyed.links:
            linked = history.child_triggered(holder, child.run.task, child.index, child.awaited, linked=True)
            events.append(event_row(parent["id"], linked, now))
        return events

    def _wait(
        self,
        connection: sqlite3.Connection,
        parent: sqlite3.Row,
        pending: Sequence[ChildRecord],
        shapes: Sequence[waiting.Shape],
        release_all: bool,
        remaining: int | None,
        linked: bool,
        now: float,
    ) -> dict[str, Any]:
        """End the parent's attempt waiting, releasing what the plan releases; its RunWaiting event.
        A root has no chain above it to read. A wait on a linked child is always checked against
        the wait graph: it may close a circle of waits (WaitCycle) with no slot kept."""
        rules = self._limits.load_rules(connection)
        held = [row[0] for row in connection.execute(self._q("trigger_children_held"), {"id": parent["id"]})]
        above = []
        if parent["parent_id"] is not None:
            above = connection.execute(self._q("trigger_children_chain"), {"id": parent["id"]}).fetchall()
        chain = waiting.ancestors(parent, above, to_json)
        plan = waiting.plan(rules, parent, json.loads(parent["tags"]), held, shapes, chain, release_all)
        kept = json.dumps(sorted(plan.kept))
        connection.execute(
            self._q("trigger_children_wait"),
            {
                "id": parent["id"],
                "attempt": parent["attempt"],
                "kept": kept,
                "released": json.dumps(sorted(plan.released)),
                "remaining": remaining,
                "now": now,
                "most_attempts": STORED_INT_MAX,
            },
        )
        connection.execute(self._q("trigger_children_release"), {"id": parent["id"], "kept": kept})
        connection.execute(self._q("trigger_children_keep"), {"id": parent["id"], "forever": FOREVER})
        blocked = connection.execute(self._q("trigger_children_blocked"), {"every": linked}).fetchall()
        waiting.refuse_stuck(parent["id"], blocked, rules, to_json)  # across chains, the wait applied
        waited = history.run_waiting(parent["attempt"], [child.id for child in pending], plan.released, plan.kept)
        return event_row(parent["id"], waited, now)

    def _children(self, connection: sqlite3.Connection, parent_id: str) -> dict[int, ChildRecord]:
        rows = connection.execute(self._q("run_children"), {"parent": parent_id})
        return {row["child_index"]: waiting.child_record(row, to_json) for row in rows}

    def run_children(self, run_id: str) -> list[ChildRecord]:
        return list(self._children(self._connection(), run_id).values())

    def resume_parents(
        self, connection: sqlite3.Connection, ended: Sequence[str] | None, events: list[dict[str, Any]], now: float
    ) -> list[str]:
        """Queue again every waiting parent (of `ended`, or all when None) whose awaited children
        have all ended (or, for a wait on any, one more of them); its kept slots go (it takes its
        slots again by claiming)."""
        if ended is not None and not ended:
            return []
        ids = None if ended is None else json.dumps(list(ended))
        resumed = connection.execute(self._q("resume_parents"), {"ids": ids, "now": now}).fetchall()
        if resumed:
            connection.execute(self._q("release_holders"), {"ids": json.dumps([row[0] for row in resumed])})
            events.extend(event_row(row[0], history.run_resumed(row[1] or 0.0), now) for row in resumed)
        return [row[0] for row in resumed]

    def cancel_run(self, run_id: str) -> RunStatus:
        """Cancel the run and its unfinished children linked to it: queued and waiting ones end
        now, running ones are asked (their workers end them); its waiting parent may resume."""
        with self._write() as (connection, now):
            tree = dict(connection.execute(self._q("cancel_run_tree"), {"id": run_id}).fetchall())
            if not tree:
                raise RunNotFound(f"no run with id {run_id!r}")
            params = {"ids": json.dumps(list(tree)), "now": now}
            ended = [row[0] for row in connection.execute(self._q("cancel_run_tree_queued"), params)]
            waited = [row[0] for row in connection.execute(self._q("cancel_run_waiting"), params)]
            connection.execute(self._q("release_holders"), {"ids": json.dumps(waited)})
            connection.execute(self._q("cancel_run_requested"), params)
            events = [event_row(node, canceled_event(run_id, node, tree[node]), now) for node in ended + waited]
            if run_id in ended or run_id in waited:
                self.resume_parents(connection, [run_id], events, now)
            connection.executemany(self._q("insert_event"), events)
            row = connection.execute(self._q("run_status"), {"id": run_id}).fetchone()
        return RunStatus(row[0])
