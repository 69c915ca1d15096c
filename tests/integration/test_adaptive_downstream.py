"""An adaptive queue against a fake downstream, with a real worker, on both backends (issue 25).

The downstream is a counter behind a lock: a call that finds more than
`capacity` calls in progress is answered "overloaded" (the task raises
`Snooze(0, overloaded=True)`). From a declared limit of 20, the effective
limit must come down and settle at 4 +- 1 while the downstream takes 4, then
rise back to 20 once it recovers (a generous deadline only catches a hang); every move of
it is audited (the LimitChanged chain of source `adaptive` has no gap, never
leaves [min, 20] and ends at the stored value). That each claim applies the
limit in force at once is tests/contract/test_adaptive_contract.py's.
"""

from __future__ import annotations

import statistics
import threading
import time

from tests.support.adaptive_downstream import assert_audited_chain, keep_busy
from tidegate import Adaptive, App, Concurrency, Snooze

# Seconds: only catches a limit that never settles (the settling itself is judged by the limits
# seen, not by when). It takes a few seconds alone, 5 at load 9 on two cores; a stall adds its own.
GIVE_UP_AFTER = 120.0
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

    def settled(limit: int, seen: list[int]) -> bool:
        window = seen[-40:]  # two seconds of samples
        return len(seen) >= 40 and max(window) <= 6 and 3 <= statistics.median(window) <= 5

    seen = keep_busy(app, call_partner, lambda: _limit(app), settled, timeout=GIVE_UP_AFTER, backlog=BACKLOG)
    window = seen[-40:]
    assert sum(3 <= limit <= 5 for limit in window) >= 0.75 * len(window), window
    assert downstream.most <= 20

    downstream.capacity = 1000  # it recovers

    def recovered(limit: int, seen: list[int]) -> bool:
        return limit == 20

    keep_busy(app, call_partner, lambda: _limit(app), recovered, timeout=GIVE_UP_AFTER, backlog=BACKLOG)
    assert_audited_chain(app, declared=20, least=1, now=_limit(app))
