"""A step's hold on its pool slots: the claim, its deadline, and the threads that renew it.

Each claim keeps `safe_until`, the moment (a monotonic reading of the guard's
clock) after which the store could find its lease expired, less a margin
(`domain.leases`): the send of the request that last set the lease, plus
the lease. The renewer moves it on with each renewal that lands and
declares the claim lost when it passes, from a thread that never waits for
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
class SlotClaim:
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
    (monotonic; see `SlotClaim.safe_until`)."""

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
    """Renews every held claim each third of its lease, and gives a claim up at its `safe_until`.

    Two daemon threads per guard: one calls the store (renewals one after the
    other), the other schedules them and enforces the deadlines. A renewal
    blocked in an outage (up to the connection timeout) thus never holds a
    deadline up: a claim whose lease could have run out in the store is
    declared lost while its renewal is still waiting for an answer.
    """

    def __init__(self, store: Store, clock: Clock = SYSTEM_CLOCK) -> None:
        self._store = store
        self._clock = clock  # due times and deadlines are its readings; the waits stay on real time
        self._condition = threading.Condition()
        self._due: dict[SlotClaim, float] = {}  # claim -> monotonic time of its next renewal
        self._renewing: set[SlotClaim] = set()  # renewals sent to the store thread, not answered yet
        self._calls: queue.SimpleQueue[SlotClaim | None] = queue.SimpleQueue()
        self._wake_at = math.inf  # when the scheduling thread's current wait ends
        self._threads: list[threading.Thread] = []
        self._closed = False

    def add(self, claim: SlotClaim) -> None:
        if claim.lease_seconds is None:
            return  # nothing of its own to renew: window slots share the run's lease
        due = self._clock.monotonic() + claim.lease_seconds / 3
        with self._condition:
            self._due[claim] = due
            if not self._threads:
                self._threads = [
                    threading.Thread(target=self._loop, name="tidegate-pool-renewal", daemon=True),
                    threading.Thread(target=self._call_loop, name="tidegate-pool-renewal-calls", daemon=True),
                ]
                for thread in self._threads:
                    thread.start()
            elif min(due, claim.safe_until) < self._wake_at:
                self._condition.notify()  # only then: waking the thread for every claim costs a GIL hand-off each

    def discard(self, claim: SlotClaim) -> None:
        with self._condition:
            self._due.pop(claim, None)

    def _loop(self) -> None:
        while True:
            with self._condition:
                while not self._closed:
                    now = self._clock.monotonic()
                    lapsed = [claim for claim in self._due if claim.safe_until <= now]
                    ready = [
                        claim
                        for claim, due in self._due.items()
                        if due <= now and claim not in self._renewing and claim.safe_until > now
                    ]
                    if lapsed or ready:
                        break
                    nexts = (self._next_event(claim, due) for claim, due in self._due.items())
                    self._wake_at = min(nexts, default=now + 60)
                    self._condition.wait(self._wake_at - now)
                self._wake_at = math.inf
                if self._closed:
                    self._calls.put(None)
                    return
                for claim in lapsed:
                    del self._due[claim]
                for claim in ready:
                    # only claims with a lease are scheduled for renewal (lease_seconds set)
                    self._due[claim] = now + claim.lease_seconds / 3  # type: ignore[operator]
                    self._renewing.add(claim)
            for claim in lapsed:
                self._lose(claim, "its lease could run out before a renewal lands: renewals failed or are late")
            for claim in ready:
                self._calls.put(claim)

    def _next_event(self, claim: SlotClaim, due: float) -> float:
        """When the claim next needs the scheduler: its deadline, or its renewal unless one is on its way."""
        return claim.safe_until if claim in self._renewing else min(due, claim.safe_until)

    def _call_loop(self) -> None:
        while (claim := self._calls.get()) is not None:
            self._renew(claim)

    def _renew(self, claim: SlotClaim) -> None:
        sent = self._clock.monotonic()  # the store stamps the new expiry no earlier than this
        kept: bool | None = None
        try:
            kept = self._store.renew_slots(claim.fence, claim.step_key)
        except Exception:  # a store hiccup: try again at the next turn, unless the deadline comes first
            log.exception("renewing the pool slots of step %s failed; will retry", claim.step_key)
        with self._condition:
            self._renewing.discard(claim)
            held = claim in self._due  # not a claim released, or given up, while it was being renewed
            if held and kept:
                # only claims with a lease are renewed (lease_seconds set)
                claim.safe_until = max(claim.safe_until, usable_until(sent, claim.lease_seconds))  # type: ignore[arg-type]
            elif held and kept is False:
                del self._due[claim]
            if held and self._due.get(claim, math.inf) <= self._clock.monotonic():
                self._condition.notify()  # its next renewal fell due while this one was on its way
        if held and kept is False:
            self._lose(claim, "lease expired or run taken over")

    def _lose(self, claim: SlotClaim, why: str) -> None:
        log.warning("step %s of run %s lost its pool slots (%s)", claim.step_key, claim.fence[0], why)
        claim.lost.set()
        for callback in claim.on_lost:
            try:
                callback()
            except Exception:  # e.g. its event loop has closed: the threads must go on for the other claims
                log.exception("a lost-slots callback of step %s failed", claim.step_key)

    def close(self) -> None:
        with self._condition:
            self._closed = True
            self._due.clear()
            self._condition.notify()
            threads = self._threads
        for thread in threads:
            if thread is not threading.current_thread():
                thread.join(timeout=5)
