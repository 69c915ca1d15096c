"""SQLite: each queue's run counts, and pausing or resuming a queue (the operator's controls).

A pause is part of the rules (a column of the queue row, read with them), so
it moves the rules version: the next claim re-reads the rules and skips the
queue, at no extra cost to claims that find the rules unchanged. A resume
moves its queued runs' dispatch deadlines past the paused time
(domain/deadlines.py), measured from the pause's own audit event.
"""

from __future__ import annotations

import sqlite3

from tidegate.domain import events as history
from tidegate.domain.deadlines import resumed_deadline
from tidegate.domain.errors import QueueNotFound
from tidegate.storage import port
from tidegate.storage.shared import wakes
from tidegate.storage.shared.reads import QueueReads
from tidegate.storage.sqlite.database import Aggregate
from tidegate.storage.sqlite.payloads import event_row


class Queues(Aggregate, QueueReads, port.QueueVerbs):
    """The queue verbs of the storage port."""

    def set_queue_paused(self, queue: str, paused: bool) -> bool:
        with self._write() as (connection, now):
            changed = connection.execute(
                self._q("set_queue_paused"), {"name": queue, "paused": int(paused), "now": now}
            ).fetchone()
            if changed is None:
                if connection.execute(self._q("set_queue_paused_known"), {"name": queue}).fetchone() is None:
                    raise QueueNotFound(f"no queue named {queue!r} is declared")
                wakes.only_if(False)
                return False
            connection.execute(self._q("bump_rules_version"), {"now": now})
            if not paused:
                self._move_deadlines(connection, queue, now)
            connection.execute(self._q("insert_event"), event_row(None, history.queue_paused(queue, paused), now))
        wakes.only_if(not paused)  # its runs may be claimed now
        return True

    def _move_deadlines(self, connection: sqlite3.Connection, queue: str, now: float) -> None:
        """The paused time does not count against dispatch deadlines (domain/deadlines.py)."""
        paused_at = connection.execute(self._q("set_queue_paused_since"), {"name": queue}).fetchone()[0]
        if paused_at is None:  # paused before its pause was audited: nothing to measure from
            return
        moved = [
            {"id": run_id, "deadline_at": resumed_deadline(deadline_at, queued_at, paused_at, now)}
            for run_id, deadline_at, queued_at in connection.execute(
                self._q("set_queue_paused_deadlines"), {"name": queue}
            )
        ]
        connection.executemany(self._q("set_queue_paused_deadline"), moved)
