"""What a worker tells the store at its next turn: attempts started and outcomes.

Task threads and the loop both append; the loop takes everything at once for
one `Store.cycle`, and puts it back in front if the store could not take it,
so a report is neither lost nor reordered by an outage.

One outcome may skip the queue (`send_now`): a resumed parent whose replay was
answered from the store has done its work by the time it returns, and waiting
for the loop's next turn would hold its slots for a whole cycle or two. Its
start must then reach the store first, exactly once: it goes with the outcome
if no turn took it yet, and if a turn is sending it, `send_now` waits for that
turn to end (a turn in flight, never the next one).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from tidegate.domain.model import CycleResult, Outcome
from tidegate.storage.port import Fence

log = logging.getLogger("tidegate.worker")

TURN_WAIT_BOUND = 30.0  # seconds `send_now` waits for a turn sending its start before leaving it to the next


class Reports:
    """A thread-safe buffer of starts and outcomes; an outcome calls `on_outcome` (the loop's wake-up)."""

    def __init__(self, on_outcome: Callable[[], None]) -> None:
        self._on_outcome = on_outcome
        self._starts: list[Fence] = []
        self._outcomes: list[Outcome] = []
        self._sending: set[Fence] = set()  # the starts the turn in flight took
        self._lock = threading.Lock()
        self._turn_ended = threading.Condition(self._lock)

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
            self._sending = set(starts)
        return starts, outcomes

    def sent(self) -> None:
        """The turn that took the last reports has committed them."""
        with self._lock:
            self._sending = set()
            self._turn_ended.notify_all()

    def put_back(self, starts: list[Fence], outcomes: list[Outcome]) -> None:
        """Return what a failed turn took, ahead of anything reported since."""
        with self._lock:
            self._starts[:0] = starts
            self._outcomes[:0] = outcomes
            self._sending = set()
            self._turn_ended.notify_all()

    def send_now(self, outcome: Outcome, cycle: Callable[[list[Fence], list[Outcome]], CycleResult]) -> None:
        """Write `outcome` now with `cycle(starts, outcomes)` (a store cycle claiming nothing), from
        the calling thread, with its attempt's start if that is still here; if the store fails, or
        a turn sending the start does not end in time, the outcome waits for the next turn."""
        fence = (outcome.run_id, outcome.attempt)
        with self._lock:
            if not self._turn_ended.wait_for(lambda: fence not in self._sending, TURN_WAIT_BOUND):
                self._outcomes.append(outcome)
                starts: list[Fence] | None = None
            elif fence in self._starts:
                self._starts.remove(fence)
                starts = [fence]
            else:
                starts = []
        if starts is None:
            self._on_outcome()
            return
        try:
            result = cycle(starts, [outcome])
        except Exception:
            log.exception("could not record the outcome of run %s attempt %s now; it goes with the next turn", *fence)
            with self._lock:  # not put_back: a turn may be in flight, sending starts of its own
                self._starts[:0] = starts
                self._outcomes.append(outcome)
            self._on_outcome()
            return
        for lost in result.fenced_out:
            log.warning("run %s attempt %s was taken over; its outcome was discarded", *lost)
