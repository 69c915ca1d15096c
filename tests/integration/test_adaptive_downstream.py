"""An adaptive queue against a fake downstream, with a real worker, on both backends (issue 25).

The downstream is a counter behind a lock: a call that finds more than
`capacity` calls in progress is answered "overloaded" (the task raises
`Snooze(0, overloaded=True)`). From a declared limit of 20, the effective
limit must come down and settle at 4 +- 1 while the downstream takes 4, then
rise back to 20 once it recovers, each within a bounded time; every move of
it is audited (the LimitChanged chain of source `adaptive` has no gap, never
leaves [min, 20] and ends at the stored value). That each claim applies the
limit in force at once is tests/contract/test_adaptive_contract.py's.
"""

from __future__ import annotations

import itertools
import statistics
import threading
import time
from typing import Any

from tidegate import Adaptive, App, Concurrency, RunStatus, Snooze

SETTLE_WITHIN = 45.0  # seconds, generous for a loaded machine; it takes a few seconds alone
BACKLOG = 60
# Long beside a worker's turn (claim, report), so that the slots the limit counts are calls in
# progress: a slot is held from the claim to the report of the outcome, a call only while it runs.
CALL_SECONDS = 0.1


class Downstream:
    """A service that takes `capacity` calls at once and answers "overloaded" past it."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.active = 0
        self.most = 0
        self.calls = 0
        self._lock = threading.Lock()

    def call(self) -> bool:
        with self._lock:
            self.active += 1
            self.calls += 1
            self.most = max(self.most, self.active)
            overloaded = self.active > self.capacity
        time.sleep(CALL_SECONDS)
        with self._lock:
            self.active -= 1
        return not overloaded


def _limit(app: App) -> int | None:
    return app.store.rules().queue_limit("partner", "")


def _keep_busy(app: App, task: Any, until: Any, timeout: float) -> list[int]:
    """Keep a backlog queued until `until(limit)` holds (or the time is up); the limits seen."""
    seen: list[int] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        queued = app.store.run_counts().get(("partner", RunStatus.QUEUED), 0)
        if queued < BACKLOG:
            task.submit_many([{}] * (BACKLOG - queued))
        limit = _limit(app)
        assert limit is not None
        seen.append(limit)
        if until(limit, seen):
            return seen
        time.sleep(0.05)
    raise AssertionError(f"not settled within {timeout}s: limits seen {seen[-40:]}")


def test_the_limit_settles_at_the_downstream_s_capacity_and_rises_back_when_it_recovers(
    app: App, start_worker, database_url: str
) -> None:
    downstream = Downstream(capacity=4)
    app.queue("partner", concurrency=Concurrency(global_limit=20), adaptive=Adaptive(min=1, after=5))

    @app.task(name="t.call_partner", queue="partner")
    def call_partner() -> None:
        if not downstream.call():
            raise Snooze(0, overloaded=True)

    start_worker(queues=["partner"], max_workers=20)
    started = time.monotonic()

    def settled(limit: int, seen: list[int]) -> bool:
        window = seen[-40:]  # two seconds of samples
        return len(seen) >= 40 and max(window) <= 6 and 3 <= statistics.median(window) <= 5

    seen = _keep_busy(app, call_partner, settled, SETTLE_WITHIN)
    window = seen[-40:]
    assert sum(3 <= limit <= 5 for limit in window) >= 0.75 * len(window), window
    assert time.monotonic() - started < SETTLE_WITHIN
    assert downstream.most <= 20

    downstream.capacity = 1000  # it recovers
    _keep_busy(app, call_partner, lambda limit, seen: limit == 20, SETTLE_WITHIN)

    events = reversed(app.store.latest_events("LimitChanged", 10_000))  # oldest first
    changes = [event.metadata for event in events if event.metadata.get("source") == "adaptive"]
    assert changes and changes[0]["old"] == 20
    assert all(earlier["new"] == later["old"] for earlier, later in itertools.pairwise(changes))
    assert changes[-1]["new"] == _limit(app) == 20
    assert {change["reason"] for change in changes} == {"overloaded", "recovered"}
    assert all(1 <= change["new"] <= 20 for change in changes)
