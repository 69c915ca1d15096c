"""The PoolGuard: how a step gets, keeps and gives back its pool slots.

The store decides every grant atomically (`Store.acquire_slots`); the guard
only waits well between tries. It sleeps until the store says slots may have
been freed (`Store.listen`: a release, a sweep or a raised limit), so a freed
slot is re-used in milliseconds; a poll every TIDEGATE_CLAIM_POLL_INTERVAL plus
random TIDEGATE_CLAIM_POLL_JITTER is only the safety net for a lost wake-up,
and TIDEGATE_CLAIM_TIMEOUT bounds the wait with a `PoolClaimTimeout` that says
which pools were full. While held, slots are renewed every third of their
lease on a thread of the guard's own, so a step that blocks its thread or its
event loop cannot starve its own lease; and a claim is given up (`lost`) as
soon as the store could find its lease expired, judged on the worker's own
clock from the last renewal that was sent, without waiting for a renewal
blocked in an outage.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import queue
import random
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from typing import Any

from tidegate.domain.durations import format_duration
from tidegate.domain.errors import PoolClaimTimeout, StepFencedOut
from tidegate.domain.leases import usable_until
from tidegate.domain.steps import ScopeUse, SlotGrant
from tidegate.storage.port import Fence, Listener, Store

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ClaimPolicy:
    """How long to wait for slots and how often to look again without a wake-up (seconds)."""

    timeout: float = 600.0
    poll_interval: float = 1.0
    poll_jitter: float = 0.5


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


class _Wakeups:
    """One store subscription shared by every waiter of a guard, sync or async.

    A generation counter closes the gap between a refused try and the wait:
    a waiter that saw generation g before trying waits only while it is still g.
    """

    def __init__(self, store: Store) -> None:
        self._store = store
        self._condition = threading.Condition()
        self._generation = 0
        self._loops: set[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = set()
        self._listener: Listener | None = None

    @property
    def listening(self) -> bool:
        return self._listener is not None

    def listen(self) -> None:
        """Subscribe on first use (PostgreSQL waits here for its LISTEN to be in place)."""
        with self._condition:
            if self._listener is None:
                self._listener = self._store.listen(self._woken)

    @property
    def generation(self) -> int:
        with self._condition:
            return self._generation

    def _woken(self) -> None:
        with self._condition:
            self._generation += 1
            self._condition.notify_all()
            waiters = list(self._loops)
        for loop, event in waiters:
            try:
                loop.call_soon_threadsafe(event.set)
            except RuntimeError:  # that loop has closed; its waiter is gone
                pass

    def wait(self, seen: int, timeout: float) -> None:
        with self._condition:
            self._condition.wait_for(lambda: self._generation != seen, timeout)

    async def wait_async(self, seen: int, timeout: float, also: asyncio.Future[Any] | None = None) -> None:
        """Wait for a wake-up after generation `seen`, or for `also` to be done, at most `timeout`."""
        event = asyncio.Event()
        entry = (asyncio.get_running_loop(), event)
        with self._condition:
            if self._generation != seen:
                return
            self._loops.add(entry)
        woken = asyncio.ensure_future(event.wait())
        try:
            await asyncio.wait([woken] if also is None else [woken, also], timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            woken.cancel()
            with self._condition:
                self._loops.discard(entry)

    def close(self) -> None:
        with self._condition:
            listener, self._listener = self._listener, None
        if listener is not None:
            listener.close()


class _Renewer:
    """Renews every held claim each third of its lease, and gives a claim up at its `safe_until`.

    Two daemon threads per guard: one calls the store (renewals one after the
    other), the other schedules them and enforces the deadlines. A renewal
    blocked in an outage (up to the connection timeout) thus never holds a
    deadline up: a claim whose lease could have run out in the store is
    declared lost while its renewal is still waiting for an answer.
    """

    def __init__(self, store: Store) -> None:
        self._store = store
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
        due = time.monotonic() + claim.lease_seconds / 3
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
                    now = time.monotonic()
                    lapsed = [claim for claim in self._due if claim.safe_until <= now]
                    ready = [
                        claim for claim, due in self._due.items()
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
        sent = time.monotonic()  # the store stamps the new expiry no earlier than this
        kept: bool | None = None
        try:
            kept = self._store.renew_slots(claim.fence, claim.step_key)
        except Exception:  # a store hiccup: try again at the next turn, unless the deadline comes first
            log.exception("renewing the pool slots of step %s failed; will retry", claim.step_key)
        with self._condition:
            self._renewing.discard(claim)
            held = claim in self._due  # not a claim released, or given up, while it was being renewed
            if held and kept:
                claim.safe_until = max(claim.safe_until, usable_until(sent, claim.lease_seconds))  # type: ignore[arg-type]
            elif held and kept is False:
                del self._due[claim]
            if held and self._due.get(claim, math.inf) <= time.monotonic():
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


class PoolGuard:
    """Acquire (wait for a wake-up, poll as the fallback, give up at the timeout), renew, release.

    One guard serves a whole worker: it shares one store subscription and its
    renewal threads between every step that waits or holds slots.
    """

    def __init__(
        self, store: Store, policy: ClaimPolicy | None = None, *, jitter: Callable[[], float] = random.random
    ) -> None:
        self._store = store
        self._policy = policy or ClaimPolicy()
        self._jitter = jitter
        self._wakeups = _Wakeups(store)
        self._renewer = _Renewer(store)

    # --- acquiring ----------------------------------------------------------------------

    def acquire_sync(
        self,
        fence: Fence,
        worker_id: str,
        step_key: str,
        needs: Mapping[str, int],
        fixed_limits: Mapping[str, int] | None = None,
    ) -> SlotClaim:
        """Block until every slot of `needs` is held (all or none); see `acquire`."""
        deadline = time.monotonic() + self._policy.timeout
        self._wakeups.listen()
        while True:
            seen = self._wakeups.generation
            sent = time.monotonic()
            grant = self._store.acquire_slots(fence, worker_id, step_key, needs, fixed_limits or {})
            if grant.granted:
                return self._held(fence, step_key, needs, Handed.leased(grant, sent))
            self._wakeups.wait(seen, self._pause(fence, step_key, grant, deadline))

    async def acquire(
        self,
        fence: Fence,
        worker_id: str,
        step_key: str,
        needs: Mapping[str, int],
        fixed_limits: Mapping[str, int] | None = None,
        *,
        handed: asyncio.Future[Handed] | None = None,
        full_at: int | None = None,
    ) -> SlotClaim:
        """Wait, without blocking the event loop, until every slot of `needs` ({scope: slots}) is held.

        `handed` is resolved when another step of the run hands its slots to
        this one (`Store.finish_step`), or when a batch granted them
        (`Store.acquire_many`): then no try is needed. `full_at` is a
        wake-up generation at which the store said a request like this one
        would be refused; while nothing has woken the guard since, the first
        try is skipped (it would only be refused).

        Raises PoolRequestTooLarge at once for a request no limit can satisfy,
        PoolClaimTimeout after the policy's timeout, StepFencedOut if the
        attempt no longer owns its run.
        """
        deadline = time.monotonic() + self._policy.timeout
        if not self._wakeups.listening:
            await asyncio.to_thread(self._wakeups.listen)
        grant: SlotGrant | None = None
        while True:
            if handed is not None and handed.done():
                return self._held(fence, step_key, needs, handed.result())
            seen = self._wakeups.generation
            if seen != full_at:
                sent = time.monotonic()
                grant = await self._try(fence, worker_id, step_key, needs, fixed_limits or {})
                if grant.granted:
                    return self._held(fence, step_key, needs, Handed.leased(grant, sent))
            full_at = None  # skipped once at most: a wake-up or the poll leads to a try
            await self._wakeups.wait_async(seen, self._pause(fence, step_key, grant, deadline), also=handed)

    def generation(self) -> int:
        """The wake-up generation now: pass it as `full_at` when the store says a request is refused."""
        return self._wakeups.generation

    async def _try(
        self, fence: Fence, worker_id: str, step_key: str, needs: Mapping[str, int], fixed_limits: Mapping[str, int]
    ) -> SlotGrant:
        """One claim on a thread; cancelled meanwhile, it lets the claim finish and gives back what it got.

        Abandoning the thread's transaction instead could leave slots granted
        to no one, pinned until their lease expired.
        """
        call = asyncio.ensure_future(
            asyncio.to_thread(self._store.acquire_slots, fence, worker_id, step_key, needs, fixed_limits)
        )
        try:
            return await asyncio.shield(call)
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):  # the cancel is what the caller must see
                if (await call).granted:
                    await asyncio.to_thread(self._store.release_slots, fence, step_key)
            raise

    def _held(self, fence: Fence, step_key: str, needs: Mapping[str, int], handed: Handed) -> SlotClaim:
        claim = SlotClaim(fence, step_key, dict(needs), handed.grant.lease_seconds, handed.safe_until)
        self._renewer.add(claim)
        return claim

    def _pause(self, fence: Fence, step_key: str, grant: SlotGrant | None, deadline: float) -> float:
        """How long to wait for a wake-up before trying again; raises when there is no point."""
        grant = grant or SlotGrant(False)
        if grant.fenced_out:
            raise StepFencedOut(
                f"step {step_key}: run {fence[0]} attempt {fence[1]} was taken over; its slots are not claimed"
            )
        left = deadline - time.monotonic()
        if left <= 0:
            raise PoolClaimTimeout(_timeout_message(step_key, self._policy.timeout, grant.blocking))
        return min(left, self._policy.poll_interval + self._jitter() * self._policy.poll_jitter)

    # --- releasing ----------------------------------------------------------------------

    def release(self, claim: SlotClaim) -> None:
        """Give the slots back (waking whoever waits for them); safe to call twice."""
        self._renewer.discard(claim)
        self._store.release_slots(claim.fence, claim.step_key)

    def forget(self, claim: SlotClaim) -> None:
        """Stop renewing a claim the store already freed (recording a step finished frees its
        slots in the same transaction), saving the release's write transaction."""
        self._renewer.discard(claim)

    async def release_async(self, claim: SlotClaim) -> None:
        self._renewer.discard(claim)
        await asyncio.to_thread(self._store.release_slots, claim.fence, claim.step_key)

    @contextmanager
    def holding(
        self,
        fence: Fence,
        worker_id: str,
        step_key: str,
        needs: Mapping[str, int],
        fixed_limits: Mapping[str, int] | None = None,
    ) -> Iterator[SlotClaim]:
        """`with guard.holding(...)`: the slots are held for the block and released after it."""
        claim = self.acquire_sync(fence, worker_id, step_key, needs, fixed_limits)
        try:
            yield claim
        finally:
            self.release(claim)

    @asynccontextmanager
    async def holding_async(
        self,
        fence: Fence,
        worker_id: str,
        step_key: str,
        needs: Mapping[str, int],
        fixed_limits: Mapping[str, int] | None = None,
    ) -> AsyncIterator[SlotClaim]:
        """`async with guard.holding_async(...)`: as `holding`, without blocking the loop."""
        claim = await self.acquire(fence, worker_id, step_key, needs, fixed_limits)
        try:
            yield claim
        finally:
            await self.release_async(claim)

    def close(self) -> None:
        """Stop the subscription and the renewal thread (held slots then lapse unless released)."""
        self._wakeups.close()
        self._renewer.close()


def _timeout_message(step_key: str, timeout: float, blocking: list[ScopeUse]) -> str:
    full = ", ".join(f"pool {use.name!r} ({use.used}/{use.limit} claimed)" for use in blocking) or "its pools"
    return (
        f"step {step_key} gave up waiting for pool slots after {format_duration(timeout)} "
        f"(TIDEGATE_CLAIM_TIMEOUT): still full: {full}"
    )
