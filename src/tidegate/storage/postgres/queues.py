"""PostgreSQL: each queue's run counts, and pausing or resuming a queue (the operator's controls).

A pause is part of the rules (a column of the queue row, read by the same
`load_rules` every claim already sends), so it moves the rules version under
the rules fence: claims in flight finish first, every later one skips the
queue, and the cycle costs no extra round trip.
"""

from __future__ import annotations

from tidegate.domain import events as history
from tidegate.domain.errors import QueueNotFound
from tidegate.domain.model import QueueCounts
from tidegate.storage.postgres.database import Aggregate
from tidegate.storage.postgres.payloads import event_params
from tidegate.storage.postgres.pipeline import transaction


class Queues(Aggregate):
    """The queue verbs of the storage port."""

    def queue_counts(self) -> dict[str, QueueCounts]:
        with self._connection() as connection:
            rows = connection.execute(self._q("queue_counts")).fetchall()
        return {queue: QueueCounts(queued, running, blocked) for queue, queued, running, blocked in rows}

    def set_queue_paused(self, queue: str, paused: bool) -> bool:
        with self._connection() as connection, transaction(connection):
            connection.execute(self._q("rules_fence"))  # waits for claims in flight; the next ones see it
            row = connection.execute(self._q("set_queue_paused"), {"name": queue, "paused": paused}).fetchone()
            assert row is not None  # the statement always answers one row
            known, changed = row
            if not known:
                raise QueueNotFound(f"no queue named {queue!r} is declared")
            if changed:
                connection.execute(self._q("insert_event"), event_params(None, history.queue_paused(queue, paused)))
                if not paused:
                    connection.execute(self._q("notify"))  # its runs may be claimed now
        return bool(changed)
