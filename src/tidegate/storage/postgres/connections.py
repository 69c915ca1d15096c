"""The PostgreSQL store's connections: a pool that is back within a moment of its server.

psycopg_pool replaces a lost connection in the background and, when the
server refuses, tries again after 1, 2, 4, 8... seconds (its
`AttemptWithBackoff`, up to `reconnect_timeout`). After a 10 s outage its
next attempt could come 5 s after the server accepted connections again, and
every store call meanwhile waited for it in `getconn`: work resumed 4-5 s
late. Here those retries come at most `RECONNECT_DELAY` apart (jittered, so
many workers do not knock in step), so a call waiting for a connection gets
one within that delay of the server's return (0.1-0.4 s measured). The price
is more attempts while the server is away: about 8 a second per worker
process (one chain of retries per lost connection), against about one.
The cap relies on how psycopg_pool schedules those retries (`AddConnection`
through `schedule_task`); the outage test in tests/test_postgres_outages.py
fails if that changes.

Capping the pool's own retries was preferred to a call that connects by
itself when the pool has nothing: such calls cannot tell an empty pool from
a busy one (they would open connections past `max_size` under load), and
after a long outage the pool's next attempt may be minutes away, which would
leave every call paying for a connection of its own until then.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.pq import ConnStatus
from psycopg_pool import ConnectionPool, PoolTimeout
from psycopg_pool.pool import AddConnection, MaintenanceTask

from tidegate.domain.errors import ServerUnreachable
from tidegate.storage.urls import masked

CONNECT_TIMEOUT = 5.0
RECONNECT_DELAY = 0.5  # longest wait between two attempts to replace a lost pooled connection
POOL_NAME = "tidegate"
POOL_MIN_SIZE = 1
POOL_MAX_SIZE = 8  # a store's pool at its largest; an async pool (one per event loop that awaits it) too
WORKER_WAKE_UPS = 2  # a worker process's LISTEN connections: the worker's, and its pool guard's
SERVE_WAKE_UPS = 1  # `serve`'s: the event streams' reader, one however many streams


@dataclass(frozen=True)
class ConnectionBound:
    """The most connections one tidegate process holds open to PostgreSQL at once, by kind.

    Written once so that `tidegate doctor` (which compares the live worker processes'
    sum with max_connections) and the documentation (docs/postgres-pooler.md) say the same
    number; the multi-process test (tests/process/test_connection_bound.py) checks it
    against pg_stat_activity. Behind a transaction-mode pooler the pools go to the
    pooler and only the wake-ups reach PostgreSQL (on TIDEGATE_DATABASE_DIRECT).
    """

    pool: int  # the store's pool: every sync verb, from any thread
    async_pool: int  # the async pool of the one event loop that may await the store (submit_async, wait_async)
    wake_ups: int  # LISTEN connections, always direct to PostgreSQL

    @property
    def total(self) -> int:
        return self.pool + self.async_pool + self.wake_ups

    def parts(self) -> str:
        """E.g. "a pool of 8, 8 for async calls, 2 for wake-ups" (doctor's message names them)."""
        said = [f"a pool of {self.pool}"]
        if self.async_pool:
            said.append(f"{self.async_pool} for async calls")
        said.append(f"{self.wake_ups} for wake-up{'s' if self.wake_ups != 1 else ''}")
        return ", ".join(said)


def worker_process_bound(pool_size: int = POOL_MAX_SIZE) -> ConnectionBound:
    """A worker process: its store's pool; the async pool of the worker's event loop, which its async
    tasks' `submit_async`/`wait_async` open (none while they make no such call); the worker's
    wake-up connection, and the pool guard's, opened when a workflow step first asks for pool slots.
    Every worker of the process shares its store, hence this bound (but each worker of it listens
    on its own: a process running several workers adds `wake_ups` per extra worker)."""
    return ConnectionBound(pool=pool_size, async_pool=pool_size, wake_ups=WORKER_WAKE_UPS)


def serve_bound(pool_size: int = POOL_MAX_SIZE) -> ConnectionBound:
    """`tidegate serve`: its store's pool (requests call the store from threads, never async) and
    the event streams' one wake-up connection."""
    return ConnectionBound(pool=pool_size, async_pool=0, wake_ups=SERVE_WAKE_UPS)


class Connections:
    """Pooled autocommit connections to one database; an unreachable server becomes ServerUnreachable."""

    def __init__(
        self,
        url: str,
        *,
        where: str,
        min_size: int,
        max_size: int,
        configure: Callable[[psycopg.Connection[Any]], None],
    ) -> None:
        self.where = where  # host:port/dbname, never the password
        self._url = url  # only to mask its password where the driver quotes it back
        self._max_size = max_size
        self._probe(url)
        self._pool = _Pool(
            url,
            min_size=min_size,
            max_size=max_size,
            kwargs={"autocommit": True, "connect_timeout": round(CONNECT_TIMEOUT)},
            timeout=CONNECT_TIMEOUT,
            configure=configure,
            open=False,
            name=POOL_NAME,
        )
        try:
            self._pool.open(wait=True, timeout=CONNECT_TIMEOUT)
        except PoolTimeout:
            self._pool.close()
            raise self._timed_out() from None

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection, returned to the pool afterwards."""
        try:
            connection = self._live_connection()
            try:
                yield connection
            finally:
                self._pool.putconn(connection)
        except PoolTimeout:
            raise self._timed_out() from None
        except psycopg.OperationalError as error:
            if not _connection_lost(error):
                raise
            raise ServerUnreachable(
                f"lost the connection to PostgreSQL at {self.where}: {masked(first_line(error), self._url)}"
            ) from error

    def close(self) -> None:
        self._pool.close()

    def _live_connection(self) -> psycopg.Connection[Any]:
        """A pooled connection whose server has not hung up while it sat idle.

        After a server restart every idle connection in the pool is dead;
        handing one out would fail a verb that a fresh connection would pass.
        The pool's own `check` costs a round trip per checkout, and backs off
        a second after each failure; this costs a non-blocking read.
        """
        for _ in range(self._max_size):
            connection = self._pool.getconn()
            if _alive(connection):
                return connection
            connection.close()
            self._pool.putconn(connection)  # the pool drops it and opens a replacement
        return self._pool.getconn()

    def _probe(self, url: str) -> None:
        """Connect once, so that a wrong URL or a server that is down fails fast and says why.

        The pool would retry in the background until its timeout and then
        only report that it timed out.
        """
        try:
            psycopg.connect(url, connect_timeout=round(CONNECT_TIMEOUT)).close()
        except psycopg.Error as error:
            raise ServerUnreachable(
                f"cannot connect to PostgreSQL at {self.where}: {masked(first_line(error), url)}"
            ) from None

    def _timed_out(self) -> ServerUnreachable:
        return ServerUnreachable(
            f"cannot connect to PostgreSQL at {self.where}: no connection within {CONNECT_TIMEOUT:g}s"
        )


class _Pool(ConnectionPool[psycopg.Connection[Any]]):
    """A pool whose attempts to replace a lost connection come at most RECONNECT_DELAY apart.

    The pool schedules each retry of a failed connection attempt through
    `schedule_task`, with its doubling delay; only those retries are shortened
    (the pool's other scheduled task, shrinking idle connections, keeps its
    period). `reconnect_timeout` still ends a chain of retries.
    """

    def schedule_task(self, task: MaintenanceTask, delay: float) -> None:
        if isinstance(task, AddConnection):
            delay = min(delay, RECONNECT_DELAY * random.uniform(0.5, 1.0))
        super().schedule_task(task, delay)


def _alive(connection: psycopg.Connection[Any]) -> bool:
    """Read what an idle connection received (libpq never blocks here): a hang-up shows as an error.

    A server that hangs up first sends its reason (e.g. FATAL: terminating
    connection), then closes; one read may take only the message, the next
    then meets the end of the stream.
    """
    if connection.closed or connection.broken:
        return False
    try:
        connection.pgconn.consume_input()
        connection.pgconn.consume_input()
    except psycopg.OperationalError:
        return False
    return connection.pgconn.status == ConnStatus.OK


def _connection_lost(error: psycopg.OperationalError) -> bool:
    """A broken or refused connection, as opposed to e.g. a deadlock or a canceled statement."""
    return error.sqlstate is None or error.sqlstate.startswith(("08", "57P"))


def first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
