"""An adaptive rate against a fake downstream, with a real worker, on both backends (issue 25).

The downstream takes `capacity` calls a second: a call that finds as many calls begun within the
last second is answered "overloaded" (the task raises `Snooze(0, overloaded=True)`). From a
declared 30 a second, the rate's effective limit must come down to about the capacity and stay
near it while the downstream takes 8 a second, then rise back to 30 once it recovers (a generous
deadline only catches a hang); every move is audited (the LimitChanged chain of source `adaptive` for the target
`rate:partner@1s` has no gap, never leaves [min, 30] and ends at the stored value).
"""

from __future__ import annotations

import collections
import statistics
import threading
import time

from tests.support.adaptive_downstream import assert_audited_chain, keep_busy
from tidegate import Adaptive, App, Rate, Snooze

# Seconds: only catches a limit that never settles (the settling itself is judged by the limits
# seen, not by when). It takes a few seconds alone, 5 at load 9 on two cores; a stall adds its own.
GIVE_UP_AFTER = 120.0
BACKLOG = 40
TARGET = "rate:partner@1s"


class Downstream:
    """A service that takes `capacity` calls in any second and answers "overloaded" past it."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.begun: collections.deque[float] = collections.deque()
        self._lock = threading.Lock()

    def call(self) -> bool:
        with self._lock:
            now = time.monotonic()
            while self.begun and self.begun[0] <= now - 1.0:
                self.begun.popleft()
            self.begun.append(now)
            return len(self.begun) <= self.capacity


def _limit(app: App) -> int:
    return app.store.rules().rate_windows("rate:partner")[0].limit


def test_the_rate_settles_near_the_downstream_s_capacity_and_rises_back_when_it_recovers(
    app: App, start_worker, database_url: str
) -> None:
    downstream = Downstream(capacity=8)
    app.queue("partner", rate=Rate(limit=30, per="1s", adaptive=Adaptive(min=2, after=3)))

    @app.task(name="t.call_partner", queue="partner")
    def call_partner() -> None:
        if not downstream.call():
            raise Snooze(0, overloaded=True)

    start_worker(queues=["partner"], max_workers=8)

    def settled(limit: int, seen: list[int]) -> bool:
        window = seen[-60:]  # three seconds of samples
        return len(seen) >= 60 and max(window) <= 12 and 4 <= statistics.median(window) <= 10

    seen = keep_busy(app, call_partner, lambda: _limit(app), settled, timeout=GIVE_UP_AFTER, backlog=BACKLOG)
    assert min(seen) >= 2

    downstream.capacity = 1000  # it recovers

    def recovered(limit: int, seen: list[int]) -> bool:
        return limit == 30

    keep_busy(app, call_partner, lambda: _limit(app), recovered, timeout=GIVE_UP_AFTER, backlog=BACKLOG)
    changes = assert_audited_chain(app, declared=30, least=2, now=_limit(app))
    assert {change["target"] for change in changes} == {TARGET}
