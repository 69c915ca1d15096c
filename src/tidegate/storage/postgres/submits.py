"""PostgreSQL: submits from an event loop and in the caller's transaction (storage/submits.py).

Every path makes the store's own decisions by the same statements: the one-round-trip batch
of free_submit.py when one statement can decide the batch, else the submit script
(submit_script.py). From an event loop they run on the store's async pool (no thread: the loop
awaits each statement); in the caller's transaction, on the caller's sync or async connection,
where the admission and key locks are the caller's transaction's until it ends, and the wake-up
is the statement's `NOTIFY`, which PostgreSQL delivers only if that transaction commits.

The caller's connection must be in the store's database and schema (the statements name
tidegate's tables unqualified, and its locks are per schema) and READ COMMITTED (the counts
after a lock must see what committed before it was granted). It is checked once per connection:
its first submit sends the check as the first statement inside a savepoint, so a wrong
connection has the batch undone with it. Later submits on it need no savepoint where one
statement writes all of the batch or nothing; the full way keeps one (a refusal there may
follow writes of its own). psycopg's `isolation_level` is checked at every submit.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Sequence
from contextlib import suppress
from typing import Any, TypeVar

import psycopg
from psycopg.pq import TransactionStatus
from psycopg.rows import dict_row, tuple_row

from tidegate.domain.errors import InvalidArgument
from tidegate.domain.model import NewRun, RunRecord, RunStatus, TaskDefinition
from tidegate.domain.unique import Admission
from tidegate.storage import port
from tidegate.storage.postgres.async_connections import AsyncConnections
from tidegate.storage.postgres.database import Database
from tidegate.storage.postgres.free_submit import (
    free_answers,
    free_steps,
    free_version,
    free_version_async,
    queues_of,
)
from tidegate.storage.postgres.payloads import to_json, to_time
from tidegate.storage.postgres.script_runner import (
    RELEASE,
    UNDO,
    implicit_transaction_async,
    run_async,
    run_batch,
    run_batch_async,
    run_in_savepoint,
    run_in_savepoint_async,
    transaction_async,
)
from tidegate.storage.postgres.submit_script import Rows, Script, Step, submit
from tidegate.storage.shared import records

T = TypeVar("T")


class PostgresSubmits:
    """The `Submits` port over one store's database."""

    def __init__(self, db: Database, *, where: str, max_size: int, store: port.Store) -> None:
        self._db = db
        self._store = store  # its cancel wakes the listeners (port.WAKES)
        self._async = AsyncConnections(db.url, where=where, max_size=max_size, clock=db.clock, pooled=db.pooled)
        self._identity: tuple[str, str] | None = None  # (database, schema) of the store
        # Callers' connections found in the store's database and schema (checked once each).
        self._checked: weakref.WeakSet[Any] = weakref.WeakSet()

    # --- in the caller's transaction ---------------------------------------------------

    def enqueue_in(self, connection: Any, runs: Sequence[NewRun]) -> list[Admission]:
        if not isinstance(connection, psycopg.Connection):
            raise _wrong_kind(connection, "psycopg.Connection (or, with submit_async, a psycopg.AsyncConnection)")
        _check_open(connection)
        steps = free_steps(runs, self._version(runs))
        checked = connection in self._checked
        if steps is not None:
            if checked:
                rows = run_batch(connection, self._db.query, [*self._clocked(), *steps])
            else:
                rows = self._first_batch(connection, steps)
            answers = free_answers(runs, rows[-1])
            if answers is not None:
                return answers
            self._db.ceilings.forget()
        elif not checked:
            self._check_alone(connection)
        # The full way, under a savepoint: its refusal may follow writes of its own (replaced holders).
        return run_in_savepoint(connection, self._db.queries, _after(self._clocked(), submit(runs)))

    def _first_batch(self, connection: psycopg.Connection[Any], steps: list[Step]) -> list[Rows]:
        """A connection's first submit: the check is the first statement inside the savepoint, and
        the batch is undone with it when the connection is not the store's (one more round trip,
        the release, once per connection)."""
        try:
            check, *rows = run_batch(connection, self._db.query, [self._check_step(), *steps], savepoint=True)
            self._check_same(check[0])
        except BaseException as error:
            _undo(connection)
            if isinstance(error, psycopg.Error):
                self._check_alone(connection)  # a statement failed: a wrong database or schema says so first
            raise
        connection.execute(RELEASE)
        self._checked.add(connection)
        return rows

    def _version(self, runs: Sequence[NewRun]) -> str | None:
        """`free_version`, the ceilings read on the store's own connection when they must be."""
        if self._db.ceilings.known:
            return self._db.ceilings.free_version(queues_of(runs))
        with self._db.connection() as own:
            return free_version(self._db, runs, own)

    async def _version_async(self, runs: Sequence[NewRun]) -> str | None:
        if self._db.ceilings.known:
            return self._db.ceilings.free_version(queues_of(runs))
        async with self._async.connection() as own:
            return await free_version_async(self._db, runs, own)

    def _check_alone(self, connection: psycopg.Connection[Any]) -> None:
        row = connection.cursor(row_factory=tuple_row).execute(self._q("submit_in_check"), self._offset()).fetchone()
        self._check_same(row)
        self._checked.add(connection)

    def shares_writer(self, connection: Any) -> bool:
        return False

    async def enqueue_in_async(self, connection: Any, runs: Sequence[NewRun]) -> list[Admission]:
        if not isinstance(connection, psycopg.AsyncConnection):
            if isinstance(connection, psycopg.Connection):
                return self.enqueue_in(connection, runs)  # the caller's sync connection: it chose to block
            raise _wrong_kind(connection, "psycopg.AsyncConnection or psycopg.Connection")
        _check_open(connection)
        steps = free_steps(runs, await self._version_async(runs))
        checked = connection in self._checked
        if steps is not None:
            if checked:
                rows = await run_batch_async(connection, self._db.query, [*self._clocked(), *steps])
            else:
                rows = await self._first_batch_async(connection, steps)
            answers = free_answers(runs, rows[-1])
            if answers is not None:
                return answers
            self._db.ceilings.forget()
        elif not checked:
            await self._check_alone_async(connection)
        return await run_in_savepoint_async(connection, self._db.queries, _after(self._clocked(), submit(runs)))

    async def _first_batch_async(self, connection: psycopg.AsyncConnection[Any], steps: list[Step]) -> list[Rows]:
        try:
            check, *rows = await run_batch_async(
                connection, self._db.query, [self._check_step(), *steps], savepoint=True
            )
            self._check_same(check[0])
        except BaseException as error:
            await _undo_async(connection)
            if isinstance(error, psycopg.Error):
                await self._check_alone_async(connection)
            raise
        await connection.execute(RELEASE)
        self._checked.add(connection)
        return rows

    async def _check_alone_async(self, connection: psycopg.AsyncConnection[Any]) -> None:
        cursor = connection.cursor(row_factory=tuple_row)
        await cursor.execute(self._q("submit_in_check"), self._offset())
        self._check_same(await cursor.fetchone())
        self._checked.add(connection)

    # --- from an event loop, on the store's async pool -----------------------------------

    async def enqueue_async(self, runs: Sequence[NewRun]) -> list[Admission]:
        async with self._async.connection() as connection:
            steps = free_steps(runs, await free_version_async(self._db, runs, connection))
            if steps is not None:
                answers = free_answers(runs, (await run_batch_async(connection, self._db.query, steps))[-1])
                if answers is not None:
                    return answers
                self._db.ceilings.forget()
            # The full way. A keyed batch reads its holders mid-way: an explicit transaction. A plain
            # one reads only at its end, so, as the sync submit, it is one implicit transaction.
            keyed = any(run.unique is not None for run in runs)
            scope = transaction_async(connection) if keyed else implicit_transaction_async(connection)
            # Through a pooler the session holds no clock offset: the transaction is given it (LOCAL).
            script = _after(self._clocked(), submit(runs)) if self._db.pooled else submit(runs)
            async with scope:
                answers = await run_async(connection, self._db.queries, script)
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
        return self._db.query(name)

    def _offset(self) -> dict[str, str]:
        return {"offset": repr(self._db.clock.offset)}

    def _check_step(self) -> Step:
        """The caller's connection checked (and the clock's offset set for its transaction)."""
        return Step("submit_in_check", self._offset(), read=True)

    def _clocked(self) -> list[Step]:
        """A checked connection's transaction given the injected clock's offset (none for the real clock)."""
        return [Step("submit_in_check", self._offset())] if self._db.clock.offset else []

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
            raise _not_read_committed(isolation)

    def _store_identity(self) -> tuple[str, str]:
        if self._identity is None:
            with self._db.connection() as connection:
                row = connection.execute(self._q("submit_identity")).fetchone()
            assert row is not None
            self._identity = (row[0], row[1])
        return self._identity


def _check_open(connection: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> None:
    """The caller's connection can hold the submit in a transaction of its own, READ COMMITTED as
    psycopg will open it (the server's default is read once per connection, by the check)."""
    status = connection.info.transaction_status
    if status == TransactionStatus.INERROR:
        raise InvalidArgument("connection='s transaction has failed: roll it back before submitting in it")
    if status == TransactionStatus.ACTIVE:
        raise InvalidArgument("connection= is busy with another statement")
    if connection.autocommit and status == TransactionStatus.IDLE:
        raise InvalidArgument(
            "connection= is in autocommit mode with no transaction open: submit inside `with conn.transaction():`"
            " (the run must commit with your writes)"
        )
    level = connection.isolation_level
    if level is not None and level != psycopg.IsolationLevel.READ_COMMITTED:
        raise _not_read_committed(level.name.lower().replace("_", " "))


def _not_read_committed(isolation: str) -> InvalidArgument:
    return InvalidArgument(
        f"connection='s transaction is {isolation}; a submit needs read committed (its admission "
        "counts must see what committed before its locks)"
    )


def _after(first: list[Step], script: Script[T]) -> Script[T]:
    """`script`, its statements sent after `first` (a loop: `yield from` a list could not be sent rows)."""
    for step in first:  # noqa: UP028
        yield step
    return (yield from script)


def _undo(connection: psycopg.Connection[Any]) -> None:
    """Back to the submit's savepoint, and out of it, if the caller's transaction can still go there."""
    if not connection.closed and connection.info.transaction_status != TransactionStatus.IDLE:
        with suppress(psycopg.Error):
            for statement in UNDO:
                connection.execute(statement)


async def _undo_async(connection: psycopg.AsyncConnection[Any]) -> None:
    if not connection.closed and connection.info.transaction_status != TransactionStatus.IDLE:
        with suppress(psycopg.Error):
            for statement in UNDO:
                await connection.execute(statement)


def _wrong_kind(connection: Any, wanted: str) -> InvalidArgument:
    kind = f"{type(connection).__module__}.{type(connection).__qualname__}"
    return InvalidArgument(f"connection= on PostgreSQL takes a {wanted}, got {kind}")
