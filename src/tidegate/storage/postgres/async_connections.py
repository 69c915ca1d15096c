"""The PostgreSQL store's async connections: psycopg's AsyncConnectionPool, one per event loop.

An async submit or wait awaits its statements on the loop that called it, with no thread
per call. A psycopg_pool async pool belongs to the loop it was opened on (its workers are
tasks of that loop), so each loop gets its own, opened on its first use there and closed by
`aclose` on that loop (or, for the others, by `close`). Connections are configured as the
sync pool's are (`database.configure_async`) and carry the injected clock's offset. Through a
transaction-mode pooler (pooler.py) they keep nothing in the server's session, as the sync
pool's do: nothing prepared or set (`configure_pooled_async`), and the clock's offset is in the
statements (`Database.query`), never a session setting another client would be lent.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from tidegate.domain.clock import Clock
from tidegate.domain.errors import ServerUnreachable
from tidegate.storage.postgres.connections import CONNECT_TIMEOUT, POOL_NAME
from tidegate.storage.postgres.database import SET_CLOCK_OFFSET, configure_async, configure_pooled_async

Pool = AsyncConnectionPool[psycopg.AsyncConnection[Any]]


class AsyncConnections:
    """Pooled autocommit async connections to one database, a pool per running event loop."""

    def __init__(self, url: str, *, where: str, max_size: int, clock: Clock, pooled: bool) -> None:
        """`url` as libpq takes it; `pooled`: through a transaction-mode pooler (no session state)."""
        self._url = url
        self._pooled = pooled
        self._where = where
        self._max_size = max_size
        self._clock = clock
        self._lock = threading.Lock()  # loops of several threads may share the store
        self._pools: dict[asyncio.AbstractEventLoop, asyncio.Task[Pool]] = {}
        self._offsets: weakref.WeakKeyDictionary[psycopg.AsyncConnection[Any], float] = weakref.WeakKeyDictionary()

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """A connection of this loop's pool, back in the pool afterwards (also when the awaiting
        task is canceled: the pool rolls back an open transaction or discards a busy connection)."""
        pool = await self._pool()
        try:
            async with pool.connection() as connection:
                _honour_cancel()
                offset = self._clock.offset
                if not self._pooled and self._offsets.get(connection, 0.0) != offset:
                    await connection.execute(SET_CLOCK_OFFSET, {"offset": repr(offset)})
                    self._offsets[connection] = offset
                yield connection
        except PoolTimeout:
            raise self._unavailable(f"no connection within {CONNECT_TIMEOUT:g}s") from None

    def stats(self) -> dict[str, int]:
        """This loop's pool's figures (`pool_size`, `pool_available`, ...), empty before its first use."""
        task = self._pools.get(asyncio.get_running_loop())
        if task is None or not task.done() or task.exception() is not None:
            return {}
        return task.result().get_stats()

    async def aclose(self) -> None:
        """Close this loop's pool (the next async call opens another)."""
        with self._lock:
            task = self._pools.pop(asyncio.get_running_loop(), None)
        if task is not None:
            with suppress(Exception):
                await (await task).close()

    def close(self) -> None:
        """Close every pool whose loop can still run it; a closed loop's pool is simply dropped
        (its tasks ended with the loop, its connections close as they are collected)."""
        with self._lock:
            pools, self._pools = self._pools, {}
        for loop, task in pools.items():
            if loop.is_closed():
                continue
            if loop.is_running():  # another thread's loop, or this very one: close on it
                loop.call_soon_threadsafe(_close_soon, task)
            else:
                loop.run_until_complete(_close(task))

    async def _pool(self) -> Pool:
        loop = asyncio.get_running_loop()
        with self._lock:
            for gone in [other for other in self._pools if other.is_closed()]:
                del self._pools[gone]
            task = self._pools.get(loop)
            if task is None or (task.done() and task.exception() is not None):
                task = self._pools[loop] = loop.create_task(self._open())
        return await asyncio.shield(task)

    async def _open(self) -> Pool:
        pool: Pool = AsyncConnectionPool(
            self._url,
            min_size=1,
            max_size=self._max_size,
            kwargs={"autocommit": True, "connect_timeout": round(CONNECT_TIMEOUT)},
            timeout=CONNECT_TIMEOUT,
            configure=configure_pooled_async if self._pooled else configure_async,
            open=False,
            name=f"{POOL_NAME}-async",
        )
        try:
            await pool.open(wait=True, timeout=CONNECT_TIMEOUT)
        except PoolTimeout:
            await pool.close()
            raise self._unavailable(f"no connection within {CONNECT_TIMEOUT:g}s") from None
        return pool

    def _unavailable(self, why: str) -> ServerUnreachable:
        return ServerUnreachable(f"cannot connect to PostgreSQL at {self._where}: {why}")


def _honour_cancel() -> None:
    """Raise the cancellation of the calling task if a wait swallowed it. Python 3.11's
    `asyncio.wait_for`, which the pool's wait for a free connection uses, returns the connection
    when a cancel arrives as it is handed over, and the cancel is lost: a canceled `wait_async`
    would then poll on. The task still counts the request (`cancelling()`): honour it here, and
    the pool takes the connection back."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


_closing: set[asyncio.Task[None]] = set()  # closes under way (a task not referenced may be collected)


def _close_soon(task: asyncio.Task[Pool]) -> None:
    closing = asyncio.ensure_future(_close(task))
    _closing.add(closing)
    closing.add_done_callback(_closing.discard)


async def _close(task: asyncio.Task[Pool]) -> None:
    with suppress(Exception):
        await (await task).close()
