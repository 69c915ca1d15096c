"""A step's hold on its pool slots (what `PoolGuard.acquire` gives): its deadline, and the threads
that renew it.

Each hold keeps `safe_until`, the moment (a monotonic reading of the guard's
clock) after which the store could find its lease expired, less a margin
(`domain.leases`): the send of the request that last set the lease, plus
the lease. The renewer moves it on with each renewal that lands and
declares the hold lost when it passes, from a thread that never waits for
a store call, so a step stops using its slots before the sweeper can give
them to someone else, even while a renewal hangs in an outage.
"""

from __future__ import annotations

import logging
import math
import queue
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from tidegate.domain.clock import SYSTEM_CLOCK, Clock
from tidegate.domain.leases import usable_until
from tidegate.domain.steps import SlotGrant
from tidegate.storage.port import Fence, Store

log = logging.getLogger(__name__)


@dataclass(eq=False)
class SlotHold:
    """Slots a step holds; `lost` is set if a renewal found them gone (swept, or the run taken over)
    or at `safe_until` if no renewal moved that on, and then each of `on_lost` is called, from a
    renewal thread.

    `safe_until` (monotonic) is when the store could first find the lease
    expired, less a margin (`domain.leases`): a step stops using its slots by
    then, before the sweeper can give them to someone else.
    """

    fence: Fence
    step_key: str
    needs: Mapping[str, int]
    lease_seconds: float | None
    safe_until: float = math.inf
    lost: threading.Event = field(default_factory=threading.Event)
    on_lost: list[Callable[[], None]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Handed:
    """Slots a step got without a try of its own: the grant, and until when it may use them
    (monotonic; see `SlotHold.safe_until`)."""

    grant: SlotGrant
    safe_until: float

    @classmethod
    def leased(cls, grant: SlotGrant, sent_at: float) -> Handed:
        """Slots whose lease the store set in a request sent at `sent_at` (monotonic)."""
        return cls(grant, lease_deadline(grant, sent_at))


def lease_deadline(grant: SlotGrant, sent_at: float) -> float:
    """The `safe_until` of slots granted by a request sent at `sent_at` (monotonic)."""
    return math.inf if grant.lease_seconds is None else usable_until(sent_at, grant.lease_seconds)


class Renewer:
    """Renews every hold each third of its lease, and gives a hold up at its `safe_until`.

    Two daemon threads per guard: one calls the store (renewals one after the
    other), the other schedules them and enforces the deadlines. A renewal
    blocked in an outage (up to the connection timeout) thus never holds a
    deadline up: a hold whose lease could have run out in the store is
    declared lost while its renewal is still waiting for an answer.
    """

    def __init__(self, store: Store, clock: Clock = SYSTEM_CLOCK) -> None:
        self._store = store
        self._clock = clock  # due times and deadlines are its readings; the waits stay on real time
        self._condition = threading.Condition()
        self._due: dict[SlotHold, float] = {}  # hold -> monotonic time of its next renewal
        self._renewing: set[SlotHold] = set()  # renewals sent to the store thread, not answered yet
        self._calls: queue.SimpleQueue[SlotHold | None] = queue.SimpleQueue()
        self._wake_at = math.inf  # when the scheduling thread's current wait ends
        self._threads: list[threading.Thread] = []
        self._closed = False

    def add(self, hold: SlotHold) -> None:
        if hold.lease_seconds is None:
            return  # nothing of its own to renew: fan-out slots share the run's lease
        due = self._clock.monotonic() + hold.lease_seconds / 3
        with self._condition:
            self._due[hold] = due
            if not self._threads:
                self._threads = [
                    threading.Thread(target=self._loop, name="tidegate-pool-renewal", daemon=True),
                    threading.Thread(target=self._call_loop, name="tidegate-pool-renewal-calls", daemon=True),
                ]
                for thread in self._threads:
                    thread.start()
            elif min(due, hold.safe_until) < self._wake_at:
                self._condition.notify()  # only then: waking the thread for every hold costs a GIL hand-off each

    def discard(self, hold: SlotHold) -> None:
        with self._condition:
            self._due.pop(hold, None)

    def _loop(self) -> None:
        while True:
            with self._condition:
                while not self._closed:
                    now = self._clock.monotonic()
                    lapsed = [hold for hold in self._due if hold.safe_until <= now]
                    ready = [
                        hold
                        for hold, due in self._due.items()
                        if due <= now and hold not in self._renewing and hold.safe_until > now
                    ]
                    if lapsed or ready:
                        break
                    nexts = (self._next_event(hold, due) for hold, due in self._due.items())
                    self._wake_at = min(nexts, default=now + 60)
                    self._condition.wait(self._wake_at - now)
                self._wake_at = math.inf
                if self._closed:
                    self._calls.put(None)
                    return
                for hold in lapsed:
                    del self._due[hold]
                for hold in ready:
                    # only holds with a lease are scheduled for renewal (lease_seconds set)
                    self._due[hold] = now + hold.lease_seconds / 3  # type: ignore[operator]
                    self._renewing.add(hold)
            for hold in lapsed:
                self._lose(hold, "its lease could run out before a renewal lands: renewals failed or are late")
            for hold in ready:
                self._calls.put(hold)

    def _next_event(self, hold: SlotHold, due: float) -> float:
        """When the hold next needs the scheduler: its deadline, or its renewal unless one is on its way."""
        return hold.safe_until if hold in self._renewing else min(due, hold.safe_until)

    def _call_loop(self) -> None:
        while (hold := self._calls.get()) is not None:
            self._renew(hold)

    def _renew(self, hold: SlotHold) -> None:
        sent = self._clock.monotonic()  # the store stamps the new expiry no earlier than this
        kept: bool | None = None
        try:
            kept = self._store.renew_slots(hold.fence, hold.step_key)
        except Exception:  # a store hiccup: try again at the next turn, unless the deadline comes first
            log.exception("renewing the pool slots of step %s failed; will retry", hold.step_key)
        with self._condition:
            self._renewing.discard(hold)
            held = hold in self._due  # not a hold released, or given up, while it was being renewed
            if held and kept:
                # only holds with a lease are renewed (lease_seconds set)
                hold.safe_until = max(hold.safe_until, usable_until(sent, hold.lease_seconds))  # type: ignore[arg-type]
            elif held and kept is False:
                del self._due[hold]
            if held and self._due.get(hold, math.inf) <= self._clock.monotonic():
                self._condition.notify()  # its next renewal fell due while this one was on its way
        if held and kept is False:
            self._lose(hold, "lease expired or run taken over")

    def _lose(self, hold: SlotHold, why: str) -> None:
        log.warning("step %s of run %s lost its pool slots (%s)", hold.step_key, hold.fence[0], why)
        hold.lost.set()
        for callback in hold.on_lost:
            try:
                callback()
            except Exception:  # e.g. its event loop has closed: the threads must go on for the other holds
                log.exception("a lost-slots callback of step %s failed", hold.step_key)

    def close(self) -> None:
        with self._condition:
            self._closed = True
            self._due.clear()
            self._condition.notify()
            threads = self._threads
        for thread in threads:
            if thread is not threading.current_thread():
                thread.join(timeout=5)
