"""A gate a test opens from its own thread and a task waits on, in a thread or in an event loop.

An async step that polled a `threading.Event` (`while not e.is_set(): await
asyncio.sleep(...)`) busy-waits; `threading.Event.wait` would block its loop, and
`asyncio.to_thread(e.wait)` would hold a thread of the loop's default executor,
which the engine's own slot calls use. `ThreadGate` wakes each async waiter on its
own loop instead (`call_soon_threadsafe`), so the step sleeps until the test opens
the gate, or until a bound passes.
"""

from __future__ import annotations

import asyncio
import threading


class ThreadGate:
    def __init__(self) -> None:
        self._opened = threading.Event()
        self._lock = threading.Lock()
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []

    def set(self) -> None:
        with self._lock:
            self._opened.set()
            waiters, self._waiters = self._waiters, []
        for loop, event in waiters:
            if not loop.is_closed():  # a closed loop's waiter is gone with it
                loop.call_soon_threadsafe(event.set)

    def is_set(self) -> bool:
        return self._opened.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """From a thread, as `threading.Event.wait`: False if `timeout` passed first."""
        return self._opened.wait(timeout)

    async def wait_async(self, within: float) -> bool:
        """From a coroutine, without blocking its loop: False if `within` seconds passed first."""
        event = asyncio.Event()
        with self._lock:
            if self._opened.is_set():
                return True
            self._waiters.append((asyncio.get_running_loop(), event))
        try:
            await asyncio.wait_for(event.wait(), within)
        except TimeoutError:
            return False
        return True
