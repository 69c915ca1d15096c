"""PostgreSQL: submits from an event loop and in the caller's transaction (storage/submits.py).

Every path runs the one submit script (submit_script.py): on the store's async pool (no
thread: the loop awaits each statement), or on the caller's sync or async connection inside
the caller's transaction, under a savepoint. There the admission and key locks are the
caller's transaction's until it ends, and the wake-up is the `NOTIFY` the script's `enqueue`
sends, which PostgreSQL delivers only if that transaction commits.

The caller's connection must be in the store's database and schema (the statements name
tidegate's tables unqualified, and its locks are per schema) and READ COMMITTED (the counts
after a lock must see what committed before it was granted).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus
from psycopg.rows import dict_row, tuple_row

from tidegate.domain.errors import InvalidArgument
from tidegate.domain.model import NewRun, RunRecord, RunStatus, TaskDefinition
from tidegate.domain.unique import Admission
from tidegate.storage import port, records
from tidegate.storage.postgres.async_connections import AsyncConnections
from tidegate.storage.postgres.database import Database
from tidegate.storage.postgres.payloads import to_json, to_time
from tidegate.storage.postgres.script_runner import (
    implicit_transaction_async,
    run_async,
    run_in_savepoint,
    run_in_savepoint_async,
    transaction_async,
)
from tidegate.storage.postgres.submit_script import submit


class PostgresSubmits:
    """The `Submits` port over one store's database."""

    def __init__(self, db: Database, url: str, *, where: str, max_size: int, store: port.Store) -> None:
        self._db = db
        self._store = store  # its cancel wakes the listeners (port.WAKES)
        self._async = AsyncConnections(url, where=where, max_size=max_size, clock=db.clock)
        self._identity: tuple[str, str] | None = None  # (database, schema) of the store

    # --- in the caller's transaction ---------------------------------------------------

    def enqueue_in(self, connection: Any, runs: Sequence[NewRun]) -> list[Admission]:
        if not isinstance(connection, psycopg.Connection):
            raise _wrong_kind(connection, "psycopg.Connection (or, with submit_async, a psycopg.AsyncConnection)")
        _check_open(connection.autocommit, connection.info.transaction_status)
        row = connection.cursor(row_factory=tuple_row).execute(self._q("submit_in_check"), self._offset()).fetchone()
        self._check_same(row)
        return run_in_savepoint(connection, self._db.queries, submit(runs))

    def shares_writer(self, connection: Any) -> bool:
        return False

    async def enqueue_in_async(self, connection: Any, runs: Sequence[NewRun]) -> list[Admission]:
        if not isinstance(connection, psycopg.AsyncConnection):
            if isinstance(connection, psycopg.Connection):
                return self.enqueue_in(connection, runs)  # the caller's sync connection: it chose to block
            raise _wrong_kind(connection, "psycopg.AsyncConnection or psycopg.Connection")
        _check_open(connection.autocommit, connection.info.transaction_status)
        cursor = connection.cursor(row_factory=tuple_row)
        await cursor.execute(self._q("submit_in_check"), self._offset())
        self._check_same(await cursor.fetchone())
        return await run_in_savepoint_async(connection, self._db.queries, submit(runs))

    # --- from an event loop, on the store's async pool -----------------------------------

    async def enqueue_async(self, runs: Sequence[NewRun]) -> list[Admission]:
        # A keyed batch reads its holders mid-way: an explicit transaction. A plain one reads only
        # at its end, so, as the sync submit, it is one implicit transaction (no BEGIN, no COMMIT).
        keyed = any(run.unique is not None for run in runs)
        async with self._async.connection() as connection:
            scope = transaction_async(connection) if keyed else implicit_transaction_async(connection)
            async with scope:
                answers = await run_async(connection, self._db.queries, submit(runs))
        return answers

    async def get_run_async(self, run_id: str) -> RunRecord | None:
        row = await self._fetch_dict("get_run", {"id": run_id})
        return None if row is None else records.run_record(row, to_time, to_json)

    async def get_task_async(self, name: str) -> TaskDefinition | None:
        row = await self._fetch_dict("get_task", {"name": name})
        return None if row is None else records.task_definition(row, to_json)

    async def cancel_run_async(self, run_id: str) -> RunStatus:
        # A cancel walks the run's tree of children (children.py) in statements written for the
        # sync connection; it is rare beside submits and waits, so it takes one thread hop.
        return await asyncio.to_thread(self._store.cancel_run, run_id)

    def async_stats(self) -> dict[str, int]:
        """The calling loop's pool figures (pool_size, pool_available, requests_waiting, ...)."""
        return self._async.stats()

    async def aclose(self) -> None:
        await self._async.aclose()

    def close(self) -> None:
        self._async.close()

    # --- helpers --------------------------------------------------------------------------

    async def _fetch_dict(self, name: str, params: dict[str, Any]) -> dict[str, Any] | None:
        async with self._async.connection() as connection:
            cursor = connection.cursor(row_factory=dict_row)
            await cursor.execute(self._q(name), params)
            return await cursor.fetchone()

    def _q(self, name: str) -> str:
        return self._db.queries[name]

    def _offset(self) -> dict[str, str]:
        return {"offset": repr(self._db.clock.offset)}

    def _check_same(self, row: tuple[Any, ...] | None) -> None:
        assert row is not None  # a SELECT of values returns its row
        database, schema, isolation, _ = row
        store = self._store_identity()
        if (database, schema) != store:
            raise InvalidArgument(
                f"connection= is to database {database!r}, schema {schema!r}; this app's store is database "
                f"{store[0]!r}, schema {store[1]!r} (the run would not be where workers look)"
            )
        if isolation != "read committed":
            raise InvalidArgument(
                f"connection='s transaction is {isolation}; a submit needs read committed (its admission "
                "counts must see what committed before its locks)"
            )

    def _store_identity(self) -> tuple[str, str]:
        if self._identity is None:
            with self._db.connection() as connection:
                row = connection.execute(self._q("submit_identity")).fetchone()
            assert row is not None
            self._identity = (row[0], row[1])
        return self._identity


def _check_open(autocommit: bool, status: TransactionStatus) -> None:
    """The caller's connection can hold the submit in a transaction of its own."""
    if status == TransactionStatus.INERROR:
        raise InvalidArgument("connection='s transaction has failed: roll it back before submitting in it")
    if status == TransactionStatus.ACTIVE:
        raise InvalidArgument("connection= is busy with another statement")
    if autocommit and status == TransactionStatus.IDLE:
        raise InvalidArgument(
            "connection= is in autocommit mode with no transaction open: submit inside `with conn.transaction():`"
            " (the run must commit with your writes)"
        )


def _wrong_kind(connection: Any, wanted: str) -> InvalidArgument:
    kind = f"{type(connection).__module__}.{type(connection).__qualname__}"
    return InvalidArgument(f"connection= on PostgreSQL takes a {wanted}, got {kind}")
