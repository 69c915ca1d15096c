"""What a worker tells the store at its next turn: attempts started and outcomes.

Task threads and the loop both append; the loop takes everything at once for
one `Store.cycle`, and puts it back in front if the store could not take it,
so a report is neither lost nor reordered by an outage.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from tidegate.domain.model import Outcome
from tidegate.storage.port import Fence


class Reports:
    """A thread-safe buffer of starts and outcomes; an outcome calls `on_outcome` (the loop's wake-up)."""

    def __init__(self, on_outcome: Callable[[], None]) -> None:
        self._on_outcome = on_outcome
        self._starts: list[Fence] = []
        self._outcomes: list[Outcome] = []
        self._lock = threading.Lock()

    def started(self, fence: Fence) -> None:
        with self._lock:
            self._starts.append(fence)

    def ended(self, outcome: Outcome) -> None:
        with self._lock:
            self._outcomes.append(outcome)
        self._on_outcome()

    def __bool__(self) -> bool:
        return bool(self._starts or self._outcomes)

    def take(self) -> tuple[list[Fence], list[Outcome]]:
        """Everything reported so far, as (starts, outcomes), leaving the buffer empty."""
        with self._lock:
            starts, self._starts = self._starts, []
            outcomes, self._outcomes = self._outcomes, []
        return starts, outcomes

    def put_back(self, starts: list[Fence], outcomes: list[Outcome]) -> None:
        """Return what a failed turn took, ahead of anything reported since."""
        with self._lock:
            self._starts[:0] = starts
            self._outcomes[:0] = outcomes
