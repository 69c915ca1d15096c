"""SQLite worker registry: ranks for the fill order, heartbeats and the overflow signal."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence

from tidegate.domain import events as history
from tidegate.domain.model import WorkerRegistration
from tidegate.storage import port
from tidegate.storage.shared import registry
from tidegate.storage.sqlite.database import Aggregate, Database
from tidegate.storage.sqlite.limits import Limits
from tidegate.storage.sqlite.payloads import event_row, to_json


class Workers(Aggregate, port.WorkerVerbs):
    """The worker verbs of the storage port, and the fill order they set up."""

    def __init__(self, db: Database, limits: Limits) -> None:
        super().__init__(db)
        self._limits = limits
        self.fill_order = registry.FillOrder()

    def register_worker(self, registration: WorkerRegistration) -> int:
        worker_id, fill_order = registration.worker_id, registration.fill_order
        with self._write() as (connection, now):
            live = {row["id"]: row["rank"] for row in connection.execute(self._q("live_worker_ranks"), {"now": now})}
            rank = registry.rank_for(worker_id, live)
            connection.execute(
                self._q("register_worker"),
                {
                    "id": worker_id,
                    "rank": rank,
                    "capacity": registration.capacity,
                    "queues": json.dumps(sorted(registration.queues)),
                    "fill_order": int(fill_order),
                    "now": now,
                    "ttl": registration.ttl,
                },
            )
        self.fill_order.registered(worker_id, rank, fill_order)
        return rank

    def heartbeat_worker(self, worker_id: str, ttl: float) -> bool:
        with self._write() as (connection, now):
            row = connection.execute(self._q("heartbeat_worker"), {"id": worker_id, "now": now, "ttl": ttl})
            return row.fetchone() is not None

    def deregister_worker(self, worker_id: str) -> None:
        with self._write() as (connection, _):
            connection.execute(self._q("deregister_worker"), {"id": worker_id})
            connection.execute(self._q("release_locks"), {"id": worker_id})
        self.fill_order.left(worker_id)  # higher-ranked workers may now claim: woken (`WAKES`)

    def check_overflow(self, worker_id: str, queues: Sequence[str], interval: float) -> int | None:
        """Raise the overflow signal (once per interval, across workers) when eligible runs wait for a worker.

        Eligible means the claim policy would admit it were there room: runs
        held back by a limit or a rate do not count. Only when every live worker serving
        these queues is full; returns the backlog when this call raised it.
        """
        with self._write() as (connection, now):
            workers = connection.execute(self._q("worker_fill_state"), {"now": now}).fetchall()
            serving = registry.all_serving_full(workers, queues, to_json)
            if not serving:
                return None
            rules = self._limits.load_rules(connection)
            usage = dict(connection.execute(self._q("scope_usage")))
            rows = [
                row
                for queue in queues
                for row in connection.execute(
                    self._q("check_overflow_window"), {"queue": queue, "now": now, "limit": registry.OVERFLOW_SAMPLE}
                )
            ]
            rates = self._limits.live_rates(connection, now)
            eligible = registry.eligible_backlog(rows, rules, usage, rates, to_json, float)
            if eligible == 0:
                return None
            taken = connection.execute(
                self._q("take_duty"), {"name": registry.OVERFLOW_DUTY, "holder": worker_id, "now": now, "ttl": interval}
            ).fetchone()
            if taken is None:
                return None
            overflow = history.capacity_overflow(eligible, serving, queues)
            connection.execute(self._q("insert_event"), event_row(None, overflow, now))
        return eligible

    def fill_order_queues(
        self, connection: sqlite3.Connection, worker_id: str, queues: Sequence[str], now: float
    ) -> list[str]:
        """The queues this worker may claim from now: all of them, unless it is in the fill order."""
        rows = connection.execute(self._q("worker_fill_state"), {"now": now})
        return registry.fill_order_queues(rows, worker_id, queues, to_json)
