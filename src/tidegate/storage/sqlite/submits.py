"""SQLite: submits from an event loop and in the caller's transaction (storage/submits.py).

In the caller's transaction the submit is the store's own: `Runs.insert_runs` (admission
included) or `Unique.admit` (keys), written on the caller's `sqlite3.Connection` under its
write lock and a savepoint, so a refusal leaves the caller's transaction as it was. A submit
that finds no transaction open opens it (`BEGIN IMMEDIATE`) and needs no savepoint: a refusal
rolls back the transaction it opened, which holds nothing of the caller's. SQLite
has one writer: the caller's transaction holds the write lock from the submit until it
ends, which is what keeps the ceilings and keys it judged true at its commit. No wake-up
datagram is sent (it would come before the commit); every listener watches
`PRAGMA data_version`, which moves when the caller commits (wakeups.py's backstop, 50 ms).

From an event loop the verbs take one thread hop each (`asyncio.to_thread`): Python's
sqlite3 has no non-blocking interface, and a write may wait for the file's one writer
(busy_timeout), which must not stall the loop. The store keeps one connection per thread,
so the hop reuses the executor thread's connection.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tidegate.domain.errors import InvalidArgument
from tidegate.domain.model import NewRun, RunRecord, RunStatus, TaskDefinition
from tidegate.domain.unique import Admission
from tidegate.storage import port
from tidegate.storage.sqlite.database import Database
from tidegate.storage.sqlite.runs import Runs
from tidegate.storage.sqlite.unique import Unique


class SQLiteSubmits:
    """The `Submits` port over one store's file."""

    def __init__(self, db: Database, runs: Runs, unique: Unique, store: port.Store) -> None:
        self._db = db
        self._runs = runs
        self._unique = unique
        self._store = store  # its verbs that let runs in wake the listeners (port.WAKES)
        # The caller's database files found to be this store's: a connection's main file never changes,
        # so a name checked once is not stat'ed again on every submit (a few names at most per app).
        self._same_files: set[str] = set()

    def enqueue_in(self, connection: Any, runs: Sequence[NewRun]) -> list[Admission]:
        if not isinstance(connection, sqlite3.Connection):
            kind = f"{type(connection).__module__}.{type(connection).__qualname__}"
            raise InvalidArgument(f"connection= on SQLite takes a sqlite3.Connection, got {kind}")
        self._check_same_file(connection)
        with self._callers_write(connection) as now:
            if any(run.unique is not None for run in runs):
                return self._unique.admit(connection, runs, now)
            self._runs.insert_runs(connection, runs, now)
            return [Admission(run.id) for run in runs]

    def shares_writer(self, connection: Any) -> bool:
        return isinstance(connection, sqlite3.Connection) and connection.in_transaction

    async def enqueue_in_async(self, connection: Any, runs: Sequence[NewRun]) -> list[Admission]:
        # The caller's sqlite3 connection belongs to the caller's thread (check_same_thread):
        # it is written here, on the loop, as the caller's own statements are.
        return self.enqueue_in(connection, runs)

    async def enqueue_async(self, runs: Sequence[NewRun]) -> list[Admission]:
        return await asyncio.to_thread(self._enqueue, runs)

    async def get_run_async(self, run_id: str) -> RunRecord | None:
        return await asyncio.to_thread(self._runs.get_run, run_id)

    async def get_task_async(self, name: str) -> TaskDefinition | None:
        return await asyncio.to_thread(self._runs.get_task, name)

    async def cancel_run_async(self, run_id: str) -> RunStatus:
        return await asyncio.to_thread(self._store.cancel_run, run_id)

    async def aclose(self) -> None:
        """Nothing is held per loop: the threads' connections close with the store."""

    def close(self) -> None:
        """As `aclose`."""

    def _enqueue(self, runs: Sequence[NewRun]) -> list[Admission]:
        if any(run.unique is not None for run in runs):
            return self._store.enqueue_unique(runs)
        if runs:
            self._store.enqueue(runs)
        return [Admission(run.id) for run in runs]

    def _check_same_file(self, connection: sqlite3.Connection) -> None:
        main = next((row[2] for row in connection.execute("PRAGMA database_list") if row[1] == "main"), "")
        if main in self._same_files:
            return
        if not main or not Path(main).exists() or not Path(main).samefile(self._db.path):
            raise InvalidArgument(
                f"connection= is to {main or 'an in-memory database'!r}; this app's store is {str(self._db.path)!r}"
                " (the run would not be where workers look)"
            )
        self._same_files.add(main)

    @contextmanager
    def _callers_write(self, connection: sqlite3.Connection) -> Iterator[float]:
        """The caller's transaction as the writer, under a savepoint; yields its time (read once
        the write lock is held, as `Database.write` does). A transaction opened here holds nothing
        of the caller's: a failure rolls it back whole, without a savepoint's two statements."""
        opened = not connection.in_transaction
        if opened:
            if connection.isolation_level is None:
                raise InvalidArgument(
                    "connection= is in autocommit mode (isolation_level=None) with no transaction open: "
                    'run connection.execute("BEGIN IMMEDIATE") first (the run must commit with your writes)'
                )
            connection.execute("BEGIN IMMEDIATE")  # sqlite3 opens none before a read: the caller commits it
        else:
            try:
                connection.execute(self._db.queries["submit_in_lock"])
            except sqlite3.OperationalError as error:
                if getattr(error, "sqlite_errorname", "") != "SQLITE_BUSY_SNAPSHOT":
                    raise
                raise InvalidArgument(
                    "connection='s transaction read before another writer committed, so SQLite cannot make it "
                    'a writer: open it with connection.execute("BEGIN IMMEDIATE")'
                ) from None
        factory = connection.row_factory
        connection.row_factory = sqlite3.Row  # the store's statements read rows by name
        if not opened:
            connection.execute("SAVEPOINT tidegate_submit")
        try:
            yield self._db.clock.wall()
        except BaseException:
            if opened:
                connection.execute("ROLLBACK")
            else:
                connection.execute("ROLLBACK TO SAVEPOINT tidegate_submit")
                connection.execute("RELEASE SAVEPOINT tidegate_submit")
            raise
        finally:
            connection.row_factory = factory
        if not opened:
            connection.execute("RELEASE SAVEPOINT tidegate_submit")
