"""PostgreSQL: each queue's run counts, and pausing or resuming a queue (the operator's controls).

A pause is part of the rules (a column of the queue row, read by the same
`load_rules` every claim already sends), so it moves the rules version under
the rules fence: claims in flight finish first, every later one skips the
queue, and the cycle costs no extra round trip. A resume moves its queued
runs' dispatch deadlines past the paused time (domain/deadlines.py), measured
from the pause's own audit event.
"""

from __future__ import annotations

from typing import Any

import psycopg

from tidegate.domain import events as history
from tidegate.domain.deadlines import resumed_deadline
from tidegate.domain.errors import QueueNotFound
from tidegate.storage import port
from tidegate.storage.postgres.database import Aggregate
from tidegate.storage.postgres.payloads import event_params, payload_json
from tidegate.storage.postgres.pipeline import transaction
from tidegate.storage.shared import wakes
from tidegate.storage.shared.reads import QueueReads


class Queues(Aggregate, QueueReads, port.QueueVerbs):
    """The queue verbs of the storage port."""

    def set_queue_paused(self, queue: str, paused: bool) -> bool:
        with self._connection() as connection, transaction(connection):
            connection.execute(self._q("rules_fence"))  # waits for claims in flight; the next ones see it
            row = connection.execute(self._q("set_queue_paused"), {"name": queue, "paused": paused}).fetchone()
            assert row is not None  # the statement always answers one row
            known, changed = row
            if not known:
                raise QueueNotFound(f"no queue named {queue!r} is declared")
            wakes.only_if(changed and not paused)  # a resumed queue's runs may be claimed now
            if changed:
                if not paused:
                    self._move_deadlines(connection, queue)
                connection.execute(self._q("insert_event"), event_params(None, history.queue_paused(queue, paused)))
        return bool(changed)

    def _move_deadlines(self, connection: psycopg.Connection[Any], queue: str) -> None:
        """The paused time does not count against dispatch deadlines (domain/deadlines.py)."""
        rows = connection.execute(self._q("set_queue_paused_deadlines"), {"name": queue}).fetchall()
        moved = [
            {"id": run_id, "deadline_at": resumed_deadline(deadline_at, queued_at, paused_at, now)}
            for run_id, deadline_at, queued_at, paused_at, now in rows
        ]
        if moved:
            connection.execute(self._q("set_queue_paused_deadline"), {"moved": payload_json(moved)})
