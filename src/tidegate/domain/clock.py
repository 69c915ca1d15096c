"""Where time comes from: one `Clock`, injected, so tests move time instead of sleeping.

Two readings, because they answer different questions. `wall()` stamps what is
stored and compared across processes (leases, schedules, heartbeats); a store
whose database has a clock of its own (PostgreSQL) reads that one instead and
applies only the clock's `offset`, so every process still agrees. `monotonic()`
measures intervals inside one process (renewal due times, claim deadlines,
stop grace), where wall-clock jumps must not matter.

`ShiftedClock` is real time plus an offset that only grows: a test calls
`advance(lease)` and every lease, deadline and schedule that reads this clock
has passed, while waits that were already under way still end on real time.
Time never freezes, so code that polls or waits keeps working unchanged.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from typing import Protocol


class Clock(Protocol):
    """The two readings every time-dependent part of tidegate takes."""

    def wall(self) -> float:
        """Seconds since the epoch, for what is stored or crosses processes."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back, for intervals in this process."""
        ...

    @property
    def offset(self) -> float:
        """Seconds this clock runs ahead of real time (0 for the system clock)."""
        ...


class SystemClock:
    """Real time: what every process uses unless a test says otherwise."""

    offset = 0.0

    def wall(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()


class ShiftedClock:
    """Real time moved forward by `advance`; safe to read and advance from any thread."""

    def __init__(self) -> None:
        self._offset = 0.0
        self._lock = threading.Lock()

    @property
    def offset(self) -> float:
        with self._lock:
            return self._offset

    def advance(self, seconds: float) -> None:
        """Move time forward; refusing to go back keeps `monotonic` a monotonic clock."""
        if not seconds >= 0:
            raise ValueError(f"a clock only moves forward, not by {seconds!r} seconds")
        with self._lock:
            self._offset += seconds

    def wall(self) -> float:
        return time.time() + self.offset

    def monotonic(self) -> float:
        return time.monotonic() + self.offset


SYSTEM_CLOCK = SystemClock()


def wall_now(clock: Clock) -> datetime:
    """A clock's wall time as an aware UTC datetime (what cron ticks and run times are compared with)."""
    return datetime.fromtimestamp(clock.wall(), UTC)
