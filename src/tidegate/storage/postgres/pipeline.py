"""Pipelined transactions, shared by the adapter's modules.

Kept in a module of its own so that every aggregate (runs.py, claims.py,
leases.py, steps.py, ...) uses the same transaction shape.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus

from tidegate.storage.shared import wakes


@contextmanager
def transaction(connection: psycopg.Connection[Any], begin: bytes = b"BEGIN") -> Iterator[None]:
    """One transaction whose statements are pipelined: BEGIN ... COMMIT as plain statements.

    Statements are sent without waiting for one another; a fetch inside the
    block waits for everything sent before it (one round trip), and the
    COMMIT travels with whatever is still unsent when the block ends. Read
    the other cursors after the block, before the connection goes back to
    the pool. psycopg's `connection.transaction()` would sync the pipeline
    after BEGIN and again after COMMIT: two more round trips per verb.
    """
    try:
        with connection.pipeline():
            connection.execute(begin)
            yield
            send_wake(connection)
            connection.execute(b"COMMIT")
    except BaseException:
        roll_back(connection)
        raise


@contextmanager
def implicit_transaction(connection: psycopg.Connection[Any]) -> Iterator[None]:
    """Statements sent as one batch that PostgreSQL runs as one transaction, with no BEGIN or COMMIT.

    On an autocommit connection, the statements of a pipeline up to its Sync
    form one implicit transaction (READ COMMITTED: `_configure` sets the
    session's default), committed at that Sync, or rolled back as a whole if
    one fails. The batch saves the two statements an explicit transaction
    costs, each a pass through psycopg and the server, on the verbs that make
    one call per run (a submit) or per turn (a worker's cycle). Nothing may be
    fetched inside the block: a fetch syncs, which would commit what was sent
    so far. Read the cursors after the block. If the block raises, a ROLLBACK
    goes before the Sync the pipeline still sends on its way out (it ends the
    implicit transaction unapplied), so a failure never commits half a batch.
    """
    with connection.pipeline():
        try:
            yield
            send_wake(connection)
        except BaseException:
            with suppress(psycopg.Error):  # a pipeline a statement already broke rolls back by itself
                connection.execute(b"ROLLBACK")
            raise


def send_wake(connection: psycopg.Connection[Any]) -> None:
    """Queue the NOTIFY the current verb owes (`storage/shared/wakes.py`), as a transaction's last
    statement: delivered at its commit, with no round trip of its own. One channel per schema
    (a channel name is at most 63 bytes, so a digest of it): two tidegate databases in one
    PostgreSQL database never wake each other. Identical notifications of one transaction are
    folded into one; distinct payloads (a cycle's, naming its worker, and a plain one) are not."""
    for payload in wakes.owed():
        connection.execute(NOTIFY, {"payload": payload})


# Not a named query: the transaction helpers send it, not a verb (its twin is `listen_channel`).
NOTIFY = "SELECT pg_notify('tidegate_' || md5(current_schema()), %(payload)s::text)"


def roll_back(connection: psycopg.Connection[Any]) -> None:
    """Leave no failed transaction behind; a broken connection is the pool's to discard."""
    if connection.closed or connection.info.transaction_status == TransactionStatus.IDLE:
        return
    with suppress(psycopg.Error):
        connection.rollback()
