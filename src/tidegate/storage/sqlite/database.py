"""What every part of the SQLite adapter shares: the file, its connections, the named queries, wake-ups.

Every write is one `BEGIN IMMEDIATE` transaction: SQLite has a single
writer, which is what serializes claims (a deferred BEGIN that upgrades to a
write fails with SQLITE_BUSY_SNAPSHOT under concurrency). WAL lets readers
proceed meanwhile. Each thread gets its own connection.

Each aggregate of the adapter (runs, claims, leases, workers, limits, pools,
steps, schema) is an `Aggregate` over one `Database`: the store's façade builds
them around the same connections and queries, so replacing the store's
connection or queries (tests/races.py does) reaches every verb.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tidegate.domain.clock import SYSTEM_CLOCK, Clock
from tidegate.domain.errors import StoreUnavailable
from tidegate.storage.shared import rate_charges, wakes
from tidegate.storage.shared.sqlfile import load_queries
from tidegate.storage.sqlite import files
from tidegate.storage.sqlite.payloads import to_json, to_time
from tidegate.storage.sqlite.wakeups import DatagramNotifier
from tidegate.storage.urls import masked

BUSY_TIMEOUT_MS = 30_000


class Database:
    """The file, one connection per thread, the named queries and the wake-up notifier of one store."""

    def __init__(self, path: Path, clock: Clock = SYSTEM_CLOCK) -> None:
        self.path = path
        self.clock = clock  # the database's time: SQLite has no clock of its own
        self._where = masked(str(path))  # for messages: even a path may carry a password= by mistake
        try:
            files.private_folder(path.parent)
            files.private_file(path)
        except OSError as error:
            raise StoreUnavailable(masked(f"cannot create {path}: {error}")) from error
        self.queries = load_queries("tidegate.storage.sqlite")
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._connections_lock = threading.Lock()
        self._closed = False  # a closed store refuses calls, as PostgreSQL's closed pool does
        self.connection: Callable[[], sqlite3.Connection] = self._thread_connection
        self._enable_wal()
        self.wake_folder = path.with_name(path.name + ".wake")
        files.private_folder(self.wake_folder)
        self.notifier = DatagramNotifier(self.wake_folder)

    def _thread_connection(self) -> sqlite3.Connection:
        connection = getattr(self._local, "connection", None)
        if connection is None:
            if self._closed:
                raise StoreUnavailable(f"{self._where} is closed")
            try:
                connection = sqlite3.connect(
                    self.path, isolation_level=None, check_same_thread=False, timeout=BUSY_TIMEOUT_MS / 1000
                )
            except sqlite3.Error as error:
                raise StoreUnavailable(f"cannot open {self._where}: {error}") from error
            connection.row_factory = sqlite3.Row
            try:
                connection.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
                connection.execute("PRAGMA synchronous = NORMAL")
            except sqlite3.Error as error:
                connection.close()
                raise StoreUnavailable(f"cannot use {self._where}: {error}") from error
            self._local.connection = connection
            with self._connections_lock:
                self._connections.append(connection)
        return connection

    def _enable_wal(self) -> None:
        """Put the file in WAL mode (persistent), waiting out other openers.

        Switching the journal mode does not honour busy_timeout: while another
        connection writes to a fresh file, SQLite refuses at once (or quietly
        keeps the old mode), so several processes opening a new database
        together must retry until the mode really is WAL.
        """
        deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
        pause = 0.005
        while True:
            try:
                with contextlib.closing(sqlite3.connect(self.path, isolation_level=None, timeout=1)) as connection:
                    mode = connection.execute("PRAGMA journal_mode = WAL").fetchone()[0]
                if mode == "wal":
                    return
                problem = f"journal mode stayed {mode!r}"
            except sqlite3.OperationalError as error:
                problem = str(error)
            except sqlite3.Error as error:
                raise StoreUnavailable(f"cannot open {self._where}: {error}") from error
            if time.monotonic() >= deadline:
                raise StoreUnavailable(f"cannot put {self._where} in WAL mode: {problem}")
            time.sleep(pause)
            pause = min(pause * 2, 0.1)

    @contextmanager
    def write(self) -> Iterator[tuple[sqlite3.Connection, float]]:
        """A write transaction and its time, read once the write lock is held.

        Reading the clock before BEGIN IMMEDIATE would stamp a transaction that
        waited for the lock earlier than one that committed before it.
        """
        connection = self.connection()
        connection.execute("BEGIN IMMEDIATE")
        try:
            yield connection, self.clock.wall()
        except BaseException:
            connection.execute("ROLLBACK")
            raise
        connection.execute("COMMIT")
        wakes.committed()

    def close(self) -> None:
        with self._connections_lock:
            self._closed = True
            for connection in self._connections:
                connection.close()
            self._connections.clear()
        self._local = threading.local()
        self.notifier.close()


class Aggregate:
    """A group of the port's verbs over the shared `Database`."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def _connection(self) -> sqlite3.Connection:
        return self._db.connection()

    def _write(self) -> contextlib.AbstractContextManager[tuple[sqlite3.Connection, float]]:
        return self._db.write()

    def _q(self, name: str) -> str:
        return self._db.queries[name]

    def _rate_windows(self, connection: sqlite3.Connection, now: float) -> rate_charges.Windows:
        """The rate windows' states in this write transaction (BEGIN IMMEDIATE: no claim charges
        meanwhile), judged at `now`: how a run's hand-back, its cost report and a step's release
        reach them (`storage.shared.rate_charges`)."""

        def read(keys: list[rate_charges.Key]) -> tuple[dict[rate_charges.Key, int], float]:
            if not keys:
                return {}, now
            rows = connection.execute(self._q("rate_states"), {"keys": json.dumps(keys)})
            return {(scope, window): tat for scope, window, tat in rows}, now

        def write(states: dict[rate_charges.Key, int]) -> None:
            if states:
                rows = [[scope, window, tat] for (scope, window), tat in sorted(states.items())]
                connection.execute(self._q("rate_states_write"), {"states": json.dumps(rows)})

        return rate_charges.Windows(read, write)

    # The dialect of the reads written once (storage/shared/reads.py): rows read outside any write.

    def _rows(self, name: str, params: Mapping[str, Any] | None = None) -> list[sqlite3.Row]:
        return self._connection().execute(self._q(name), params or {}).fetchall()

    _tuples = _rows  # a sqlite3.Row reads by column name and by position
    _to_time = staticmethod(to_time)
    _to_json = staticmethod(to_json)
