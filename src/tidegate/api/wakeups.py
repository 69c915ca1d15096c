"""The store's wake-ups, shared by every event stream of one API.

One `Store.listen` subscription (one LISTEN connection on PostgreSQL, one
datagram listener on SQLite) however many clients stream: it is opened for
the first stream and closed when the last one leaves. Each stream gets an
`asyncio.Event` set from the listener's thread through its loop, so the
wake-up costs the event loop nothing until a stream acts on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable

from tidegate.bootstrap import Listener, Store
from tidegate.engine.operators.events import listen


class Wakeups:
    """Fans the store's wake-ups out to the streams subscribed, on their event loops."""

    def __init__(self, store: Callable[[], Store]) -> None:
        self._store = store  # the app's, opened on first use
        self._lock = threading.Lock()
        self._subscribers: dict[asyncio.Event, asyncio.AbstractEventLoop] = {}
        self._listener: Listener | None = None

    async def subscribe(self) -> asyncio.Event:
        """A fresh event, set at each wake-up until `unsubscribe`; the first opens the listener."""
        woken = asyncio.Event()
        with self._lock:
            self._subscribers[woken] = asyncio.get_running_loop()
            first = self._listener is None
        if first:
            opened: Listener | None = await asyncio.to_thread(listen, self._store(), self._wake)  # a connection
            with self._lock:
                if self._listener is None and self._subscribers:
                    self._listener, opened = opened, None
            if opened is not None:
                await asyncio.to_thread(opened.close)  # another stream's won the race, or nobody is left
        return woken

    async def unsubscribe(self, woken: asyncio.Event) -> None:
        with self._lock:
            self._subscribers.pop(woken, None)
            listener = self._listener if not self._subscribers else None
            if listener is not None:
                self._listener = None
        if listener is not None:
            await asyncio.to_thread(listener.close)

    @property
    def subscribers(self) -> int:
        return len(self._subscribers)

    def _wake(self) -> None:
        """On the listener's thread."""
        with self._lock:
            subscribers = list(self._subscribers.items())
        for woken, loop in subscribers:
            with contextlib.suppress(RuntimeError):  # that loop has closed: its stream is gone
                loop.call_soon_threadsafe(woken.set)
