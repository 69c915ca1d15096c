"""Wake-ups over LISTEN/NOTIFY, on a connection of their own.

Writers call `pg_notify` inside their transaction, so a wake-up is delivered
only once the change it announces is visible. The listener is a hint, never
the only way work is found: the worker keeps its backstop poll. A dropped
connection is therefore not an error to surface but a gap to close, by
reconnecting, listening again and asking the worker for one rescan, because
notifications sent while nobody listened are gone.

A connection can also die without a word: a frozen server process (or a
lost host) leaves the TCP connection open, and waiting for notifications on
it only ever times out, so every wake-up is lost until the backstop poll.
TCP keepalives find a peer whose host is gone; they cannot find a process
that is stopped while its kernel still acknowledges. So the thread also makes
a round trip (`SELECT 1`) every `check_interval`, which must be answered
within half of it, and treats silence as a drop: a connection that died is
replaced within one and a half intervals. (A healthy server answers in a
millisecond; a slow answer only costs a reconnect and a rescan.)

The thread waits on the connection's socket and on a socket pair of its own,
which `close` writes to: a worker that stops (or an app that closes) is not
held up until the wait's next look-up.

A worker's cycle that reports outcomes and then claims notifies with the
worker's id as its payload (every other writer, and a cycle that claims
nothing, sends an empty one). That worker's own listener (`own`) passes those
over: the cycle's own claim and cancel read, later in the same transaction,
already saw everything its commit announces, so the wake-up could only make the
worker read the store again for nothing. Only that exact
payload is passed over; any other commit, this worker's other writes included,
still wakes it. Notifications from different transactions are never folded by
the server, so a burst still arrives as many; they are all taken at once and
give one callback.
"""

from __future__ import annotations

import contextlib
import logging
import selectors
import socket
import threading
import time
from collections.abc import Callable
from typing import TypedDict

import psycopg
from psycopg import sql
from psycopg.pq import ExecStatus

from tidegate.domain.tunables import default_seconds
from tidegate.storage.postgres.connections import first_line
from tidegate.storage.postgres.pooler import DIRECT_SETTING, warn_once
from tidegate.storage.urls import masked

log = logging.getLogger(__name__)

FIRST_BACKOFF = 0.1
MAX_BACKOFF = 0.5  # a server that is back is heard from within this (then one rescan)
CHECK_INTERVAL = default_seconds("TIDEGATE_LISTEN_CHECK_INTERVAL")  # between two round trips proving it alive


class _Keepalives(TypedDict):
    """libpq's keepalive parameters, typed so that `**KEEPALIVES` can fill only them in `connect`."""

    keepalives: int
    keepalives_idle: int
    keepalives_interval: int
    keepalives_count: int


KEEPALIVES = _Keepalives(keepalives=1, keepalives_idle=10, keepalives_interval=5, keepalives_count=3)
APPLICATION_NAME = "tidegate-listener"  # tells this connection apart in pg_stat_activity


def wake_ups(
    url: str | None,
    channel_sql: str,
    callback: Callable[[], None],
    connect_timeout: float = 5.0,
    check_interval: float = CHECK_INTERVAL,
    own: str | None = None,
) -> NotifyListener | PollOnly:
    """A LISTEN on `url`, or, with no URL to listen on (a pooled store without
    TIDEGATE_DATABASE_DIRECT), nothing: work is then found by the backstop polls."""
    if url is None:
        warn_once(
            "poll-only",
            "no wake-ups through a transaction-mode pooler: workers find work by polling"
            " (TIDEGATE_POLL_INTERVAL); set %s to a URL that reaches PostgreSQL directly to listen there",
            DIRECT_SETTING,
        )
        return PollOnly()
    return NotifyListener(url, channel_sql, callback, connect_timeout, check_interval, own)


class PollOnly:
    """The subscription of a store that cannot LISTEN: no callbacks, no connection.

    A LISTEN through a transaction-mode pooler would sit on whichever server
    session the pooler lent for it, and hear nothing afterwards. Every waiter
    of a wake-up also polls (a worker every TIDEGATE_POLL_INTERVAL, a step
    waiting for pool slots every TIDEGATE_CLAIM_POLL_INTERVAL, the event
    stream's reader), so without them work is found late, never lost.
    """

    def close(self) -> None:
        """Nothing to stop."""


class NotifyListener:
    """Calls `callback` (on its own thread) after notifications on this schema's channel.

    A burst of notifications that arrived together gives one callback: the
    callback means "look again", and looking once covers all of them. Each
    time LISTEN starts (first connect, reconnect) there is one callback too,
    since whatever happened before it went unheard.
    """

    def __init__(
        self,
        url: str,
        channel_sql: str,
        callback: Callable[[], None],
        connect_timeout: float = 5.0,
        check_interval: float = CHECK_INTERVAL,
        own: str | None = None,
    ) -> None:
        self._url = url
        self._own = own
        self._channel_sql = channel_sql
        self._callback = callback
        self._connect_timeout = connect_timeout
        self._check_interval = check_interval
        self._closed = threading.Event()
        self._interrupt, self._interrupter = socket.socketpair()  # close() writes; the thread's wait wakes
        self._listening = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tidegate-pg-listener", daemon=True)
        self._thread.start()
        # Wait for the first LISTEN so that a change made right after listen()
        # returns is not missed; if the server is slow, carry on (the thread's
        # callback after a late LISTEN covers the gap).
        self._listening.wait(connect_timeout)

    def close(self) -> None:
        """Stop listening; the thread's wait for notifications ends at once."""
        self._closed.set()
        with contextlib.suppress(OSError):  # closed before
            self._interrupter.send(b"\0")
        self._thread.join(timeout=2.0)
        if not self._thread.is_alive():  # else it may still select on them: left to the garbage collector
            self._interrupt.close()
            self._interrupter.close()

    # --- the thread ---------------------------------------------------------------

    def _run(self) -> None:
        backoff = FIRST_BACKOFF
        while not self._closed.is_set():
            try:
                connection = self._connect()
            except psycopg.Error as error:
                log.warning(
                    "cannot listen for wake-ups (retrying in %.1fs): %s", backoff, masked(first_line(error), self._url)
                )
                self._closed.wait(backoff)
                backoff = min(MAX_BACKOFF, backoff * 2)
                continue
            backoff = FIRST_BACKOFF
            try:
                self._listening.set()
                self._wake()  # anything that happened before this LISTEN went unheard
                self._relay(connection)
            except psycopg.Error as error:
                if not self._closed.is_set():
                    log.warning("wake-up connection lost, reconnecting: %s", masked(first_line(error), self._url))
            finally:
                connection.close()

    def _connect(self) -> psycopg.Connection:
        connection = psycopg.connect(
            self._url,
            autocommit=True,
            connect_timeout=max(2, round(self._connect_timeout)),
            fallback_application_name=APPLICATION_NAME,
            **KEEPALIVES,
        )
        try:
            (channel,) = connection.execute(self._channel_sql).fetchone() or ("",)
            connection.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
        except BaseException:
            connection.close()
            raise
        return connection

    def _relay(self, connection: psycopg.Connection) -> None:
        next_check = time.monotonic() + self._check_interval
        while not self._closed.is_set():
            if _received(connection, max(0.0, next_check - time.monotonic()), self._interrupt, self._own):
                self._wake()
            if time.monotonic() >= next_check:
                if _round_trip(connection, self._check_interval / 2, self._own):
                    self._wake()
                next_check = time.monotonic() + self._check_interval

    def _wake(self) -> None:
        if self._closed.is_set():
            return
        try:
            self._callback()
        except Exception:  # a failing callback must not stop future wake-ups
            log.exception("wake-up callback failed")


def _received(connection: psycopg.Connection, timeout: float, interrupt: socket.socket, own: str | None) -> bool:
    """Wait up to `timeout` for notifications (not past `interrupt` becoming readable: closing),
    then take all that came in the burst; whether any of them was not `own`."""
    if _taken(connection, own):  # some arrived while a statement ran (psycopg kept them), or are unread
        return True
    with selectors.DefaultSelector() as selector:
        selector.register(connection.pgconn.socket, selectors.EVENT_READ, "server")
        selector.register(interrupt, selectors.EVENT_READ, "closing")
        ready = {key.data for key, _ in selector.select(timeout)}
    return ready == {"server"} and _taken(connection, own)


def _taken(connection: psycopg.Connection, own: str | None) -> bool:
    """Take every notification there is now, without waiting; whether any was not `own`."""
    woken = False
    for notify in connection.notifies(timeout=0):
        woken = woken or notify.payload != own
    return woken


def _round_trip(connection: psycopg.Connection, timeout: float, own: str | None) -> bool:
    """`SELECT 1`, answered within `timeout` or psycopg.OperationalError; whether notifications
    (other than `own`) came along.

    psycopg's `execute` waits for its answer without a bound, so the query
    goes through libpq directly and the wait for its answer is ours. What
    libpq read meanwhile may include notifications: they are taken here, since
    a later wait for notifications would only see new bytes on the socket.
    """
    pgconn = connection.pgconn
    pgconn.send_query(b"SELECT 1")  # a few bytes: never blocks on a connection with nothing in flight
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as selector:
        selector.register(pgconn.socket, selectors.EVENT_READ)
        pgconn.consume_input()
        while pgconn.is_busy():
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not selector.select(remaining):
                raise psycopg.OperationalError(f"the wake-up connection did not answer within {timeout:g}s")
            pgconn.consume_input()
    while (result := pgconn.get_result()) is not None:
        if result.status != ExecStatus.TUPLES_OK:
            message = result.error_message.decode(errors="replace").strip()
            raise psycopg.OperationalError(message or "the wake-up connection's check failed")
    woken = False
    while (notify := pgconn.notifies()) is not None:
        woken = woken or notify.extra.decode() != own
    return woken
