"""PostgreSQL adapter of the storage port (the distributed engine).

Workers on many machines share one database, so the database is the only
clock (`tidegate_now()` in SQL: the server's `now()` plus the injected clock's
offset, 0 outside tests; never a worker's time) and the only lock (`FOR UPDATE
SKIP LOCKED` on run rows, an advisory lock around migrations, a leased row
for the sweeper lock). It behaves exactly like the SQLite adapter: same
statuses, events and fencing; only the mechanics differ.

Connections come from a pool in autocommit mode, and each verb is one
explicit transaction whose statements are pipelined: they travel to the
server together and the commit rides with the last batch, so a worker's
cycle costs two round trips however much it reports and claims.

This class is a façade: each verb belongs to one aggregate (`runs`,
`claims`, `leases`, `workers`, `limits`, `queues`, `pools`, `steps`, `schema`), all
built over one `Database` (the pool and the named queries, `database.py`).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import psycopg

from tidegate.domain.clock import SYSTEM_CLOCK, Clock
from tidegate.storage.postgres.activity import Activity
from tidegate.storage.postgres.browse import Browse
from tidegate.storage.postgres.children import Children
from tidegate.storage.postgres.claims import Claims
from tidegate.storage.postgres.connections import CONNECT_TIMEOUT, POOL_MAX_SIZE, POOL_MIN_SIZE, worker_process_bound
from tidegate.storage.postgres.database import Database
from tidegate.storage.postgres.health import Health
from tidegate.storage.postgres.leases import Leases
from tidegate.storage.postgres.limits import Limits
from tidegate.storage.postgres.listener import CHECK_INTERVAL, NotifyListener, PollOnly, wake_ups
from tidegate.storage.postgres.look import Look
from tidegate.storage.postgres.named_rates import NamedRates
from tidegate.storage.postgres.pools import Pools
from tidegate.storage.postgres.queues import Queues
from tidegate.storage.postgres.retention import Retention
from tidegate.storage.postgres.retries import Retries
from tidegate.storage.postgres.runs import Runs
from tidegate.storage.postgres.schedules import Schedules
from tidegate.storage.postgres.schema import Schema
from tidegate.storage.postgres.steps import PostgresStepVerbs
from tidegate.storage.postgres.submits import PostgresSubmits
from tidegate.storage.postgres.telemetry import Telemetry
from tidegate.storage.postgres.unique import Unique
from tidegate.storage.postgres.workers import Workers
from tidegate.storage.shared.facade import AggregateStore


class PostgresStore(AggregateStore[AbstractContextManager[psycopg.Connection[Any]]]):
    _db: Database  # the dialect's own, beyond what the façade reaches

    def __init__(
        self,
        url: str,
        *,
        min_size: int = POOL_MIN_SIZE,
        max_size: int = POOL_MAX_SIZE,
        listen_check: float = CHECK_INTERVAL,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.url = url
        self._listen_check = listen_check  # how often a wake-up connection proves it is alive
        self._db = Database(url, min_size=min_size, max_size=max_size, clock=clock)
        self._schema = Schema(self._db)
        self._runs = Runs(self._db)
        self._unique = Unique(self._db)
        self._browse = Browse(self._db)
        self._activity = Activity(self._db)
        self._telemetry = Telemetry(self._db)
        self._limits = Limits(self._db)
        self._retries = Retries(self._db, self._limits)
        self._queues = Queues(self._db)
        self._workers = Workers(self._db, self._limits)
        self._children = Children(self._db, self._limits)
        self._claims = Claims(self._db, self._limits, self._workers, self._children)
        self._look = Look(self._db, self._limits, self._claims.forecast)
        self._pools = Pools(self._db)
        self._named_rates = NamedRates(self._db)
        self._steps = PostgresStepVerbs(self._db)
        self._leases = Leases(self._db, self._steps, self._children)
        self._schedules = Schedules(self._db)
        self._retention = Retention(self._db)
        self._health = Health(self._db, per_process=worker_process_bound(max_size))
        where = self._db.connections.where
        self.submits = PostgresSubmits(self._db, where=where, max_size=max_size, store=self)

    # --- wake-ups ----------------------------------------------------------------

    def listen(self, callback: Callable[[], None], own: str | None = None) -> NotifyListener | PollOnly:
        return wake_ups(
            self._db.listen_url,
            self._db.queries["listen_channel"],
            callback,
            connect_timeout=CONNECT_TIMEOUT,
            check_interval=self._listen_check,
            own=own,
        )

    def close(self) -> None:
        self.submits.close()
        self._db.connections.close()
