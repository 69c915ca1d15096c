"""The test's clock: `advance` it past a backoff, a lease or a schedule's tick, or `freeze` it.

It is the clock tidegate is built around (`domain/clock.py`): the store stamps
and compares with `wall()` (PostgreSQL applies only its `offset` to the
server's clock), workers measure intervals with `monotonic()`. Advancing
moves both. Freezing stops only `wall()`, so what is stored (submit times,
leases, a run's `run_at`) stands still while waits inside the process, which
run on real time and read `monotonic()`, still end.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime

from tidegate.domain.durations import parse_duration


class ControlledClock:
    """Real time moved forward by `advance` and stopped by `freeze`; safe to use from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._shift = 0.0  # seconds `wall()` runs ahead of real time while not frozen
        self._advanced = 0.0  # seconds advanced in all: `monotonic()` runs this far ahead
        self._frozen_at: float | None = None  # the wall reading while frozen

    def advance(self, duration: str | float) -> None:
        """Move time forward by a human duration (`"2h"`, `"90s"`) or seconds; never back."""
        seconds = parse_duration(duration, name="advance")
        with self._lock:
            self._shift += seconds
            self._advanced += seconds
            if self._frozen_at is not None:
                self._frozen_at += seconds

    def freeze(self) -> ControlledClock:
        """Stop the wall clock where it is (until `resume`): stored times then only move by `advance`."""
        with self._lock:
            if self._frozen_at is None:
                self._frozen_at = time.time() + self._shift
        return self

    def resume(self) -> None:
        """Let the wall clock run again from where it stood, so it never goes back (`monotonic()`
        never stopped)."""
        with self._lock:
            if self._frozen_at is not None:
                self._shift = self._frozen_at - time.time()
                self._frozen_at = None

    @property
    def frozen(self) -> bool:
        with self._lock:
            return self._frozen_at is not None

    def now(self) -> datetime:
        """`wall()` as an aware UTC datetime, to compare with a run's stored times."""
        return datetime.fromtimestamp(self.wall(), UTC)

    # --- the `tidegate.Clock` protocol ------------------------------------------------------

    def wall(self) -> float:
        with self._lock:
            return self._frozen_at if self._frozen_at is not None else time.time() + self._shift

    def monotonic(self) -> float:
        with self._lock:
            return time.monotonic() + self._advanced

    @property
    def offset(self) -> float:
        """How far `wall()` is ahead of real time (what PostgreSQL adds to its own clock)."""
        return self.wall() - time.time()
