"""Cross-process wake-ups for the embedded database.

SQLite has no LISTEN/NOTIFY, and a tight poll either wastes a core or adds
latency. Instead each listening process binds a Linux abstract datagram
socket and drops an empty marker file named after it in a folder beside the
database; a writer sends one byte to every marker's socket after it commits.
Listeners in the writer's own process are called directly. As the safety
net, every listener also watches `PRAGMA data_version`, which changes
whenever another connection commits, every `BACKSTOP_INTERVAL` seconds.

A worker's own cycles that claim do not call its listener directly (`own`,
`sender`): the cycle's claim and cancel read saw everything its commit announces. The
backstop cannot tell who committed, so it still calls back for them, at most
once per `BACKSTOP_INTERVAL`; every other writer's wake-up is unchanged.
"""

from __future__ import annotations

import hashlib
import logging
import os
import socket
import sqlite3
import sys
import threading
import uuid
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger(__name__)

BACKSTOP_INTERVAL = 0.05
_ABSTRACT = sys.platform.startswith("linux")

_local_lock = threading.Lock()
_local_listeners: dict[str, dict[str, tuple[Callable[[], None], str | None]]] = {}  # token: callback, own


class DatagramListener:
    """Calls `callback` on a wake datagram, or when the database changed."""

    def __init__(self, folder: Path, database: Path, callback: Callable[[], None], own: str | None = None) -> None:
        self._folder = folder
        self._callback = callback
        self._token = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
        self._closed = threading.Event()
        self._socket: socket.socket | None = None
        if _ABSTRACT:
            self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            self._socket.bind(_address(folder, self._token))
            self._socket.settimeout(BACKSTOP_INTERVAL)
            (folder / self._token).touch(mode=0o600)  # private, like the database beside it
        self._database = database
        with _local_lock:
            _local_listeners.setdefault(str(folder), {})[self._token] = (callback, own)
        self._thread = threading.Thread(target=self._loop, name="tidegate-sqlite-listener", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        connection = sqlite3.connect(self._database, isolation_level=None, check_same_thread=True)
        try:
            last_version = connection.execute("PRAGMA data_version").fetchone()[0]
            while not self._closed.is_set():
                woken = self._receive()
                version = connection.execute("PRAGMA data_version").fetchone()[0]
                if woken or version != last_version:
                    last_version = version
                    self._callback()
        except Exception:  # the listener is a hint; the worker's own poll remains
            log.exception("wake-up listener stopped")
        finally:
            connection.close()

    def _receive(self) -> bool:
        if self._socket is None:
            self._closed.wait(BACKSTOP_INTERVAL)
            return False
        try:
            self._socket.recv(64)
        except TimeoutError:
            return False
        except OSError:
            if self._closed.is_set():
                return False
            raise
        return True

    def close(self) -> None:
        self._closed.set()
        with _local_lock:
            _local_listeners.get(str(self._folder), {}).pop(self._token, None)
        if self._socket is not None:
            (self._folder / self._token).unlink(missing_ok=True)
        self._thread.join(timeout=2)
        if self._socket is not None:
            self._socket.close()


class DatagramNotifier:
    """Sends the wake-ups that `DatagramListener`s receive."""

    def __init__(self, folder: Path) -> None:
        self._folder = folder
        self._pid_prefix = f"{os.getpid()}-"
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) if _ABSTRACT else None
        if self._socket is not None:
            self._socket.setblocking(False)
        self._lock = threading.Lock()
        self._seen_mtime = -1
        self._peers: list[str] = []

    def notify(self, sender: str | None = None) -> None:
        """Wake every listener; `sender`, the worker whose cycle committed, skips its own listener."""
        with _local_lock:
            local = [
                callback
                for callback, own in _local_listeners.get(str(self._folder), {}).values()
                if sender is None or own != sender
            ]
        for callback in local:
            callback()
        if self._socket is None:
            return
        with self._lock:
            for token in self._remote_peers():
                try:
                    self._socket.sendto(b"w", _address(self._folder, token))
                except BlockingIOError:
                    pass  # its buffer is full of wake-ups already
                except (ConnectionRefusedError, FileNotFoundError):
                    (self._folder / token).unlink(missing_ok=True)  # its process is gone

    def _remote_peers(self) -> list[str]:
        try:
            mtime = self._folder.stat().st_mtime_ns
        except FileNotFoundError:
            return []
        if mtime != self._seen_mtime:
            self._seen_mtime = mtime
            self._peers = [name for name in os.listdir(self._folder) if not name.startswith(self._pid_prefix)]
        return self._peers

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close()


def _address(folder: Path, token: str) -> str:
    # Abstract names live outside the file system: no path-length limit, no stale files.
    digest = hashlib.sha1(str(folder.resolve()).encode()).hexdigest()[:16]
    return f"\0tidegate/{digest}/{token}"
