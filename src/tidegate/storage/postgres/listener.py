"""Wake-ups over LISTEN/NOTIFY, on a connection of their own.

Writers call `pg_notify` inside their transaction, so a wake-up is delivered
only once the change it announces is visible. The listener is a hint, never
the only way work is found: the worker keeps its backstop poll. A dropped
connection is therefore not an error to surface but a gap to close, by
reconnecting, listening again and asking the worker for one rescan, because
notifications sent while nobody listened are gone.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import psycopg
from psycopg import sql

log = logging.getLogger(__name__)

WAIT_SLICE = 0.25  # how often the thread looks up from waiting, to notice close()
FIRST_BACKOFF = 0.1
MAX_BACKOFF = 2.0
KEEPALIVES = {"keepalives": 1, "keepalives_idle": 10, "keepalives_interval": 5, "keepalives_count": 3}


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
    ) -> None:
        self._url = url
        self._channel_sql = channel_sql
        self._callback = callback
        self._connect_timeout = connect_timeout
        self._closed = threading.Event()
        self._listening = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tidegate-pg-listener", daemon=True)
        self._thread.start()
        # Wait for the first LISTEN so that a change made right after listen()
        # returns is not missed; if the server is slow, carry on (the thread's
        # callback after a late LISTEN covers the gap).
        self._listening.wait(connect_timeout)

    def close(self) -> None:
        """Stop listening; returns within about WAIT_SLICE once the thread is waiting."""
        self._closed.set()
        self._thread.join(timeout=2.0)

    # --- the thread ---------------------------------------------------------------

    def _run(self) -> None:
        backoff = FIRST_BACKOFF
        while not self._closed.is_set():
            try:
                connection = self._connect()
            except psycopg.Error as error:
                log.warning("cannot listen for wake-ups (retrying in %.1fs): %s", backoff, _first_line(error))
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
                    log.warning("wake-up connection lost, reconnecting: %s", _first_line(error))
            finally:
                connection.close()

    def _connect(self) -> psycopg.Connection:
        connection = psycopg.connect(
            self._url, autocommit=True, connect_timeout=max(2, round(self._connect_timeout)), **KEEPALIVES
        )
        try:
            (channel,) = connection.execute(self._channel_sql).fetchone() or ("",)
            connection.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
        except BaseException:
            connection.close()
            raise
        return connection

    def _relay(self, connection: psycopg.Connection) -> None:
        while not self._closed.is_set():
            if _received(connection):
                self._wake()

    def _wake(self) -> None:
        if self._closed.is_set():
            return
        try:
            self._callback()
        except Exception:  # a failing callback must not stop future wake-ups
            log.exception("wake-up callback failed")


def _received(connection: psycopg.Connection) -> bool:
    """Wait up to WAIT_SLICE for a notification, then take the rest of its burst."""
    received = False
    for _ in connection.notifies(timeout=WAIT_SLICE, stop_after=1):
        received = True
    if received:
        for _ in connection.notifies(timeout=0):
            pass
    return received


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
