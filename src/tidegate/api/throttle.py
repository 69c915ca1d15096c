"""Failed tokens slow a guesser down: past a few failures, one client address waits before trying again.

Tokens are compared in constant time, but nothing else bounded how many a
client could try. Each process remembers, per client address, when its recent
failed attempts were (a token presented and refused: bearer header, dashboard
cookie or sign-in form). An address with `MAX_FAILURES` of them within `WINDOW`
is answered 429 with `Retry-After` until the oldest leaves the window, and its
token is not even checked meanwhile, so a guess made then learns nothing, not
even that it was right. Other addresses are never slowed, and a request that
presents no token is no failure (a browser's first visit, a probe). Memory is
bounded: at most `MAX_ADDRESSES` addresses are remembered, the one that failed
least recently forgotten first. Behind a proxy every client has the proxy's
address unless uvicorn trusts its `X-Forwarded-For` (`FORWARDED_ALLOW_IPS`).
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable

MAX_FAILURES = 10
WINDOW = 60.0  # seconds
MAX_ADDRESSES = 10_000


class FailureThrottle:
    """Recent failed attempts per client address; `wait` says how long an address must still wait.

    Pages are answered on worker threads as well as on the event loop, hence the lock. `clock` is
    a monotonic clock in seconds (a test passes its own).
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()
        self._lock = threading.Lock()

    def wait(self, address: str) -> int:
        """Whole seconds before `address` may present a token again (0: it may now)."""
        now = self._clock()
        with self._lock:
            if address not in self._failures:  # asking remembers nothing: only failures take memory
                return 0
            recent = self._recent(address, now)
            if len(recent) < MAX_FAILURES:
                return 0
            return max(1, math.ceil(recent[0] + WINDOW - now))

    def failed(self, address: str) -> None:
        now = self._clock()
        with self._lock:
            self._recent(address, now).append(now)
            self._failures.move_to_end(address)
            while len(self._failures) > MAX_ADDRESSES:
                self._failures.popitem(last=False)

    def _recent(self, address: str, now: float) -> deque[float]:
        recent = self._failures.setdefault(address, deque())
        while recent and recent[0] <= now - WINDOW:
            recent.popleft()
        return recent
