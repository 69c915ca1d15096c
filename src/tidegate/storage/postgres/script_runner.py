"""Running a submit's script (submit_script.py), or a batch of statements, over a psycopg connection.

Both runners send the script's statements in a pipeline: a statement whose rows the script
does not read travels with the next one that it does, so a submit costs about as many round
trips as it has decisions to make; a batch (`run_batch`, free_submit.py) is read only after its
Sync, one round trip in all. Where the transaction is the store's own, it is
BEGIN ... COMMIT around the script; where it is the caller's, a savepoint, so that a refused
submit leaves the caller's transaction as it was (nothing of the batch, no failed state).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager, suppress
from typing import Any, TypeVar, cast

import psycopg
from psycopg.pq import TransactionStatus
from psycopg.rows import tuple_row

from tidegate.storage.postgres.database import PLANNED_PER_CALL, named_cursor
from tidegate.storage.postgres.submit_script import Rows, Script, Step

T = TypeVar("T")
Queries = dict[str, str]

SAVEPOINT = b"SAVEPOINT tidegate_submit"
RELEASE = b"RELEASE SAVEPOINT tidegate_submit"
UNDO = (b"ROLLBACK TO SAVEPOINT tidegate_submit", RELEASE)
_START: Rows = cast(Rows, None)  # what starts a generator: `send(None)` is its `next()`


def run(connection: psycopg.Connection[Any], queries: Queries, script: Script[T]) -> T:
    """Drive `script` on `connection`, in whatever transaction it holds."""
    rows = _START
    while True:
        try:
            step = script.send(rows)
        except StopIteration as done:
            result: T = done.value
            return result
        rows = _execute(connection, queries, step)


def run_in_savepoint(connection: psycopg.Connection[Any], queries: Queries, script: Script[T]) -> T:
    """`run` inside the caller's open transaction, under a savepoint undone if the script raises."""
    try:
        with connection.pipeline():
            connection.execute(SAVEPOINT)
            result = run(connection, queries, script)
            connection.execute(RELEASE)
        return result
    except BaseException:
        if not connection.closed and connection.info.transaction_status != TransactionStatus.IDLE:
            with suppress(psycopg.Error):
                for statement in UNDO:
                    connection.execute(statement)
        raise


async def run_async(connection: psycopg.AsyncConnection[Any], queries: Queries, script: Script[T]) -> T:
    """`run` over an async connection: the same statements, each awaited, no thread."""
    rows = _START
    while True:
        try:
            step = script.send(rows)
        except StopIteration as done:
            result: T = done.value
            return result
        rows = await _execute_async(connection, queries, step)


async def run_in_savepoint_async(connection: psycopg.AsyncConnection[Any], queries: Queries, script: Script[T]) -> T:
    """`run_in_savepoint` over the caller's async connection."""
    try:
        async with connection.pipeline():
            await connection.execute(SAVEPOINT)
            result = await run_async(connection, queries, script)
            await connection.execute(RELEASE)
        return result
    except BaseException:
        if not connection.closed and connection.info.transaction_status != TransactionStatus.IDLE:
            with suppress(psycopg.Error):
                for statement in UNDO:
                    await connection.execute(statement)
        raise


@asynccontextmanager
async def transaction_async(connection: psycopg.AsyncConnection[Any]) -> AsyncIterator[None]:
    """pipeline.transaction's shape on an async pooled connection: BEGIN ... COMMIT pipelined.

    A failure (or the awaiting task's cancellation) rolls back when it can; a connection left
    mid-statement goes back to the pool, which discards it rather than hand it out again.
    """
    try:
        async with connection.pipeline():
            await connection.execute(b"BEGIN")
            yield
            await connection.execute(b"COMMIT")
    except BaseException:
        if not connection.closed and connection.info.transaction_status in (
            TransactionStatus.INTRANS,
            TransactionStatus.INERROR,
        ):
            with suppress(psycopg.Error):
                await connection.rollback()
        raise


def run_batch(
    connection: psycopg.Connection[Any], query: Callable[[str], str], steps: Sequence[Step], *, savepoint: bool = False
) -> list[Rows]:
    """Send `steps` in one pipeline and read the rows of those that read after its Sync: one
    round trip (reads deferred past the commit).

    On an autocommit connection (the store's) the batch is one implicit transaction, committed
    at that Sync; a failure before it sends a ROLLBACK first, so nothing of the batch commits.
    On a connection in a transaction (the caller's), the batch is part of that transaction,
    which is left to its owner; `savepoint`: the batch starts with the submit's savepoint, for
    the caller to release or undo (`UNDO`) once it has read the answers.
    """
    if len(steps) == 1 and not savepoint:  # one statement: one round trip without a pipeline's own work
        cursor = _send(connection, query, steps[0])
        return [cursor.fetchall()] if steps[0].read else []
    own = connection.autocommit and connection.info.transaction_status == TransactionStatus.IDLE
    with connection.pipeline():
        try:
            if savepoint:
                connection.execute(SAVEPOINT)
            cursors = [(_send(connection, query, step), step.read) for step in steps]
        except BaseException:
            if own:
                with suppress(psycopg.Error):
                    connection.execute(b"ROLLBACK")
            raise
    return [cursor.fetchall() for cursor, read in cursors if read]


async def run_batch_async(
    connection: psycopg.AsyncConnection[Any],
    query: Callable[[str], str],
    steps: Sequence[Step],
    *,
    savepoint: bool = False,
) -> list[Rows]:
    """`run_batch` over an async connection (a cancel before the Sync rolls the store's own back)."""
    if len(steps) == 1 and not savepoint:
        cursor = await _send_async(connection, query, steps[0])
        return [await cursor.fetchall()] if steps[0].read else []
    own = connection.autocommit and connection.info.transaction_status == TransactionStatus.IDLE
    async with connection.pipeline():
        try:
            if savepoint:
                await connection.execute(SAVEPOINT)
            cursors = [(await _send_async(connection, query, step), step.read) for step in steps]
        except BaseException:
            if own:
                with suppress(psycopg.Error):
                    await connection.execute(b"ROLLBACK")
            raise
    return [await cursor.fetchall() for cursor, read in cursors if read]


def _send(connection: psycopg.Connection[Any], query: Callable[[str], str], step: Step) -> psycopg.Cursor[Any]:
    return named_cursor(connection, step.name, tuple_row).execute(query(step.name), step.params)


async def _send_async(
    connection: psycopg.AsyncConnection[Any], query: Callable[[str], str], step: Step
) -> psycopg.AsyncCursor[Any]:
    cursor = _async_cursor(connection, step.name)
    await cursor.execute(query(step.name), step.params)
    return cursor


def _async_cursor(connection: psycopg.AsyncConnection[Any], name: str) -> psycopg.AsyncCursor[Any]:
    """As named_cursor: a statement planned per call inlines its values."""
    if name in PLANNED_PER_CALL:
        return psycopg.AsyncClientCursor(connection, row_factory=tuple_row)
    return connection.cursor(row_factory=tuple_row)


def _execute(connection: psycopg.Connection[Any], queries: Queries, step: Step) -> Rows:
    cursor = named_cursor(connection, step.name, tuple_row).execute(queries[step.name], step.params)
    return cursor.fetchall() if step.read else []


async def _execute_async(connection: psycopg.AsyncConnection[Any], queries: Queries, step: Step) -> Rows:
    cursor = _async_cursor(connection, step.name)
    await cursor.execute(queries[step.name], step.params)
    return await cursor.fetchall() if step.read else []


@asynccontextmanager
async def implicit_transaction_async(connection: psycopg.AsyncConnection[Any]) -> AsyncIterator[None]:
    """pipeline.implicit_transaction on an async pooled connection: the statements up to the
    pipeline's Sync are one implicit transaction; a failure sends a ROLLBACK before that Sync."""
    async with connection.pipeline():
        try:
            yield
        except BaseException:
            with suppress(psycopg.Error):  # a pipeline a statement already broke rolls back by itself
                await connection.execute(b"ROLLBACK")
            raise
