"""SQLite adapter of the storage port (the embedded default).

Every write is one `BEGIN IMMEDIATE` transaction (see `database.py`). This
class is a façade: each verb belongs to one aggregate (`runs`, `claims`,
`leases`, `workers`, `limits`, `queues`, `pools`, `steps`, `schema`), all built over
one `Database` (the file's connections, the named queries and the wake-ups).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

from tidegate.domain.clock import SYSTEM_CLOCK, Clock
from tidegate.storage.shared import wakes
from tidegate.storage.shared.facade import AggregateStore
from tidegate.storage.sqlite.activity import Activity
from tidegate.storage.sqlite.browse import Browse
from tidegate.storage.sqlite.children import Children
from tidegate.storage.sqlite.claims import Claims
from tidegate.storage.sqlite.database import Database
from tidegate.storage.sqlite.health import Health
from tidegate.storage.sqlite.leases import Leases
from tidegate.storage.sqlite.limits import Limits
from tidegate.storage.sqlite.look import Look
from tidegate.storage.sqlite.named_rates import NamedRates
from tidegate.storage.sqlite.pools import Pools
from tidegate.storage.sqlite.queues import Queues
from tidegate.storage.sqlite.retention import Retention
from tidegate.storage.sqlite.retries import Retries
from tidegate.storage.sqlite.runs import Runs
from tidegate.storage.sqlite.schedules import Schedules
from tidegate.storage.sqlite.schema import Schema
from tidegate.storage.sqlite.steps import SQLiteStepVerbs
from tidegate.storage.sqlite.submits import SQLiteSubmits
from tidegate.storage.sqlite.telemetry import Telemetry
from tidegate.storage.sqlite.unique import Unique
from tidegate.storage.sqlite.wakeups import DatagramListener
from tidegate.storage.sqlite.workers import Workers


class SQLiteStore(AggregateStore[sqlite3.Connection]):
    _db: Database  # the dialect's own, beyond what the façade reaches

    def __init__(self, url: str, path: Path, *, clock: Clock = SYSTEM_CLOCK) -> None:
        self.url = url
        self._db = Database(path, clock)
        self._schema = Schema(self._db)
        self._limits = Limits(self._db)
        self._queues = Queues(self._db)
        self._runs = Runs(self._db, self._limits)
        self._unique = Unique(self._db, self._runs)
        self._browse = Browse(self._db)
        self._retries = Retries(self._db, self._runs)
        self._activity = Activity(self._db)
        self._telemetry = Telemetry(self._db)
        self._workers = Workers(self._db, self._limits)
        self._children = Children(self._db, self._limits, self._runs)
        self._claims = Claims(self._db, self._limits, self._workers, self._children)
        self._look = Look(self._db, self._limits)
        self._pools = Pools(self._db)
        self._named_rates = NamedRates(self._db)
        self._steps = SQLiteStepVerbs(self._db)
        self._leases = Leases(self._db, self._steps, self._children)
        self._schedules = Schedules(self._db, self._unique)
        self._retention = Retention(self._db)
        self._health = Health(self._db)
        self.submits = SQLiteSubmits(self._db, self._runs, self._unique, self)

    # --- wake-ups ----------------------------------------------------------------

    def _send_wake(self, wake: wakes.Wake) -> None:
        """Datagrams (and in-process calls) once the verb's write committed; a wake-up named after
        a worker (its cycle that claims) passes over that worker's own listener."""
        payloads = wake.payloads
        if wake.committed and payloads:
            self._db.notifier.notify(sender=None if wakes.EVERYONE in payloads else min(payloads))

    def listen(self, callback: Callable[[], None], own: str | None = None) -> DatagramListener:
        return DatagramListener(self._db.wake_folder, self._db.path, callback, own)

    def close(self) -> None:
        self._db.close()
