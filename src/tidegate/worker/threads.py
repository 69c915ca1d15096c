"""A fixed pool of daemon threads for sync tasks.

`concurrent.futures.ThreadPoolExecutor` joins its threads when the
interpreter exits, so one task stuck in a C call (a long `time.sleep`, a
socket read) would keep a stopped worker process alive after it handed its
runs back. Daemon threads let the process exit; the worker's capacity
accounting still counts such a thread as busy until it really returns.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

_STOP = object()


class DaemonThreadPool:
    def __init__(self, size: int, name: str) -> None:
        self._jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._threads = [
            threading.Thread(target=self._serve, name=f"{name}-{index}", daemon=True) for index in range(size)
        ]
        for thread in self._threads:
            thread.start()

    def submit(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run `fn(*args)` on a pool thread; `fn` reports its own outcome and handles its errors."""
        self._jobs.put((fn, args))

    def shutdown(self) -> None:
        """Let idle threads end; busy ones end when their job returns (or with the process)."""
        for _ in self._threads:
            self._jobs.put(_STOP)

    def _serve(self) -> None:
        while True:
            job = self._jobs.get()
            if job is _STOP:
                return
            fn, args = job
            fn(*args)
