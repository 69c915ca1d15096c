"""PostgreSQL worker registry: ranks for the fill order, heartbeats and the overflow signal.

The registry (`tidegate_workers`) gives ranks for the fill order and lets
the sweep recover the runs of a worker whose heartbeat stopped.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row

from tidegate.domain import events as history
from tidegate.domain.jsonvalue import dumps
from tidegate.domain.model import WorkerRegistration
from tidegate.storage import port
from tidegate.storage.postgres.database import Aggregate, Database
from tidegate.storage.postgres.limits import Limits
from tidegate.storage.postgres.payloads import event_params, to_json
from tidegate.storage.postgres.pipeline import transaction
from tidegate.storage.shared import registry


class Workers(Aggregate, port.WorkerVerbs):
    """The worker verbs of the storage port, and the fill order they set up."""

    def __init__(self, db: Database, limits: Limits) -> None:
        super().__init__(db)
        self._limits = limits
        self.fill_order = registry.FillOrder()

    def register_worker(self, registration: WorkerRegistration) -> int:
        worker_id, fill_order = registration.worker_id, registration.fill_order
        with self._connection() as connection, transaction(connection):
            connection.execute(self._q("register_worker_lock"))
            live = dict(connection.execute(self._q("live_worker_ranks")).fetchall())
            rank = registry.rank_for(worker_id, live)
            params = {
                "id": worker_id,
                "rank": rank,
                "capacity": registration.capacity,
                "queues": dumps(sorted(registration.queues)),
                "fill_order": fill_order,
                "ttl": registration.ttl,
            }
            connection.execute(self._q("register_worker"), params)
        self.fill_order.registered(worker_id, rank, fill_order)
        return rank

    def heartbeat_worker(self, worker_id: str, ttl: float) -> bool:
        with self._connection() as connection:  # one statement: its own transaction
            row = connection.execute(self._q("heartbeat_worker"), {"id": worker_id, "ttl": ttl}).fetchone()
        return row is not None

    def deregister_worker(self, worker_id: str) -> None:
        with self._connection() as connection, transaction(connection):
            connection.execute(self._q("deregister_worker"), {"id": worker_id})
            connection.execute(self._q("release_locks"), {"id": worker_id})  # higher ranks may claim: woken
        self.fill_order.left(worker_id)

    def check_overflow(self, worker_id: str, queues: Sequence[str], interval: float) -> int | None:
        """Raise the overflow signal (once per interval, across workers) when eligible runs wait for a worker.

        Eligible means the claim policy would admit it were there room: runs
        held back by a limit or a rate do not count. Only when every live worker serving
        these queues is full; returns the backlog when this call raised it.
        Called only by a full worker, so its round trips stay off the hot path.
        """
        with self._connection() as connection, transaction(connection):
            workers = connection.cursor(row_factory=dict_row).execute(self._q("worker_fill_state")).fetchall()
            serving = registry.all_serving_full(workers, queues, to_json)
            if not serving:
                return None
            rules = self._limits.parse_rules(connection.execute(self._q("load_rules"), {"known": None}).fetchone())
            usage = dict(connection.execute(self._q("scope_usage")).fetchall())
            rows = (
                connection.cursor(row_factory=dict_row)
                .execute(self._q("check_overflow_window"), {"queues": list(queues), "limit": registry.OVERFLOW_SAMPLE})
                .fetchall()
            )
            rates = self._limits.live_rates(connection)
            eligible = registry.eligible_backlog(rows, rules, usage, rates, to_json, datetime.timestamp)
            if eligible == 0:
                return None
            taken = connection.execute(
                self._q("take_duty"), {"name": registry.OVERFLOW_DUTY, "holder": worker_id, "ttl": interval}
            ).fetchone()
            if taken is None:
                return None
            overflow = history.capacity_overflow(eligible, serving, queues)
            connection.execute(self._q("insert_event"), event_params(None, overflow))
        return eligible

    def fill_order_queues(self, connection: psycopg.Connection[Any], worker_id: str, queues: list[str]) -> list[str]:
        """The queues a worker in the fill order may claim from now (a round trip: the registry)."""
        rows = connection.cursor(row_factory=dict_row).execute(self._q("worker_fill_state")).fetchall()
        return registry.fill_order_queues(rows, worker_id, queues, to_json)
