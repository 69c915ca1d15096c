"""An adaptive rate against a fake downstream, with a real worker, on both backends (issue 25).

The downstream takes `capacity` calls a second: a call that finds as many calls begun within the
last second is answered "overloaded" (the task raises `Snooze(0, overloaded=True)`). From a
declared 30 a second, the rate's effective limit must come down to about the capacity and stay
near it while the downstream takes 8 a second, then rise back to 30 once it recovers, each within
a bounded time; every move is audited (the LimitChanged chain of source `adaptive` for the target
`rate:partner@1s` has no gap, never leaves [min, 30] and ends at the stored value).
"""

from __future__ import annotations

import collections
import itertools
import statistics
import threading
import time
from typing import Any

from tidegate import Adaptive, App, Rate, RunStatus, Snooze

SETTLE_WITHIN = 60.0  # seconds, generous for a loaded machine
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


def _keep_busy(app: App, task: Any, until: Any, timeout: float) -> list[int]:
    """Keep a backlog queued until `until(limit, seen)` holds (or the time is up); the limits seen."""
    seen: list[int] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        queued = app.store.run_counts().get(("partner", RunStatus.QUEUED), 0)
        if queued < BACKLOG:
            task.submit_many([{}] * (BACKLOG - queued))
        seen.append(_limit(app))
        if until(seen[-1], seen):
            return seen
        time.sleep(0.05)
    raise AssertionError(f"not settled within {timeout}s: limits seen {seen[-60:]}")


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
    started = time.monotonic()

    def settled(limit: int, seen: list[int]) -> bool:
        window = seen[-60:]  # three seconds of samples
        return len(seen) >= 60 and max(window) <= 12 and 4 <= statistics.median(window) <= 10

    seen = _keep_busy(app, call_partner, settled, SETTLE_WITHIN)
    assert time.monotonic() - started < SETTLE_WITHIN
    assert min(seen) >= 2

    downstream.capacity = 1000  # it recovers
    _keep_busy(app, call_partner, lambda limit, seen: limit == 30, SETTLE_WITHIN)

    events = reversed(app.store.latest_events("LimitChanged", 10_000))  # oldest first
    changes = [event.metadata for event in events if event.metadata.get("source") == "adaptive"]
    assert changes and changes[0]["old"] == 30 and {change["target"] for change in changes} == {TARGET}
    assert all(earlier["new"] == later["old"] for earlier, later in itertools.pairwise(changes))
    assert changes[-1]["new"] == _limit(app) == 30
    assert {change["reason"] for change in changes} == {"overloaded", "recovered"}
    assert all(2 <= change["new"] <= 30 for change in changes)
