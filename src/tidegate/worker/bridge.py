"""The worker's event loop as its other threads reach it: run a call on it, wake it, call the store.

Task threads, the maintenance thread and the store's listener all hand work
to the loop through here; store calls go the other way, off the loop onto
one thread of their own, so a slow store never stalls the attempts' code.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any


class LoopBridge:
    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self.woken: asyncio.Event | None = None  # set to end the loop's current wait
        self._db = ThreadPoolExecutor(1, thread_name_prefix="tidegate-db")

    def bind(self) -> asyncio.Event:
        """Attach to the running loop (called on it once, as the worker starts serving)."""
        self.loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self.woken = asyncio.Event()
        return self.woken

    def call(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run `fn(*args)` on the loop: now if on its thread, else soon; nothing once it closed."""
        loop = self.loop
        if loop is None:
            return
        try:
            if threading.get_ident() == self._loop_thread:
                fn(*args)
            else:
                loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:
            pass  # the loop has closed: the worker is gone

    def wake(self) -> None:
        """On the loop's thread: end its wait for something to do."""
        if self.woken is not None:
            self.woken.set()

    def wake_threadsafe(self) -> None:
        self.call(self.wake)

    async def call_store(self, fn: Callable[..., Any], *args: Any) -> Any:
        assert self.loop is not None
        return await self.loop.run_in_executor(self._db, fn, *args)

    def close(self) -> None:
        self._db.shutdown(wait=True)
