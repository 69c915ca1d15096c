"""Following a run attempt's Jobs and pods: a watch per kind, resumed from its resource version.

Each kind has a thread that lists (remembering the list's resource version),
then watches from there; when a watch request ends it resumes from the last
version seen, and re-lists only when the server says that version is gone
(410) or serves none. Stopping ends the open watch requests at once rather
than leaving each to its timeout (`watch_seconds`, a minute by default). A third thread re-lists both kinds every
`poll_seconds`: the slow backstop for an event a watch missed. Every object
seen goes to `on_event` on the worker's loop, which is where the run decides.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from tidegate.workflow.kubernetes.cluster import Cluster, Obj, ResourceGone

log = logging.getLogger(__name__)

KINDS = ("job", "pod")
ERROR_PAUSE = 1.0  # seconds before listing again after an API error

OnEvent = Callable[[str, str, Obj], None]  # (kind, event type, object): on the loop
# (kind, every object that existed when the list was asked for at monotonic time `asked`): on the loop
OnListed = Callable[[str, list[Obj], float], None]


class Watcher:
    def __init__(
        self,
        cluster: Cluster,
        selector: str,
        loop: asyncio.AbstractEventLoop,
        on_event: OnEvent,
        on_listed: OnListed,
        watch_seconds: int,
        poll_seconds: float,
    ) -> None:
        self._cluster = cluster
        self._selector = selector
        self._loop = loop
        self._on_event = on_event
        self._on_listed = on_listed
        self._watch_seconds = watch_seconds
        self._poll_seconds = poll_seconds
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._ends: dict[str, Callable[[], None]] = {}  # kind -> how to end its open watch request now

    def start(self) -> None:
        for kind in KINDS:
            threading.Thread(target=self._follow, args=(kind,), name=f"tidegate-k8s-watch-{kind}", daemon=True).start()
        threading.Thread(target=self._backstop, name="tidegate-k8s-poll", daemon=True).start()

    def stop(self) -> None:
        """Stop following: end the watch requests still open (their threads then return)."""
        self._stop.set()
        with self._lock:
            ends = list(self._ends.values())
        for end in ends:
            _end(end)

    def _opened(self, kind: str, end: Callable[[], None]) -> None:
        """A watch request of `kind` is open: `stop` ends it (at once, if it came first)."""
        with self._lock:
            self._ends[kind] = end
        if self._stop.is_set():
            _end(end)

    def _post(self, fn: Callable[..., None], *args: Any) -> None:
        if self._stop.is_set():
            return
        try:
            self._loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:  # the loop closed: nobody follows this run any more
            self._stop.set()

    def relist(self, kind: str) -> str | None:
        """List every object of `kind` now; hand them over; the list's resource version."""
        asked = time.monotonic()
        items, version = self._cluster.list(kind, self._selector)
        self._post(self._on_listed, kind, items, asked)
        return version

    def _follow(self, kind: str) -> None:
        version: str | None = None
        while not self._stop.is_set():
            try:
                if version is None:
                    version = self.relist(kind)
                began, events = time.monotonic(), 0
                opened = functools.partial(self._opened, kind)
                for event_type, obj in self._cluster.watch(kind, self._selector, version, self._watch_seconds, opened):
                    if self._stop.is_set():
                        return
                    version = _version_of(obj) or version
                    events += 1
                    self._post(self._on_event, kind, event_type, obj)
                if not events and time.monotonic() - began < ERROR_PAUSE:
                    self._stop.wait(ERROR_PAUSE)  # a server that ends watches at once is not polled in a loop
            except ResourceGone:
                log.info("watch of %s %s: resource version gone (410); listing again", kind, self._selector)
                version = None
            except Exception as error:  # the API went away for a moment: list again shortly
                if self._stop.is_set():
                    return
                log.warning("watch of %s %s failed (%s); listing again", kind, self._selector, error)
                version = None
                self._stop.wait(ERROR_PAUSE)

    def _backstop(self) -> None:
        while not self._stop.wait(self._poll_seconds):
            for kind in KINDS:
                try:
                    self.relist(kind)
                except Exception as error:
                    log.warning("backstop list of %s %s failed: %s", kind, self._selector, error)


def _end(end: Callable[[], None]) -> None:
    """End a watch request; one that ended by itself meanwhile refuses, which is as good."""
    with contextlib.suppress(Exception):
        end()


def _version_of(obj: Obj) -> str | None:
    version = (obj.get("metadata") or {}).get("resourceVersion")
    return version if isinstance(version, str) and version.isdigit() else None
