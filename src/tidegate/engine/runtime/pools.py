"""The PoolGuard: how a step gets, keeps and gives back its pool slots.

The store decides every grant atomically (`Store.acquire_slots`); the guard
only waits well between tries. It sleeps until the store says slots may have
been freed (`Store.listen`: a release, a sweep or a raised limit), so a freed
slot is re-used in milliseconds; a poll every TIDEGATE_CLAIM_POLL_INTERVAL plus
random TIDEGATE_CLAIM_POLL_JITTER is only the safety net for a lost wake-up,
and TIDEGATE_CLAIM_TIMEOUT bounds the wait with a `PoolClaimTimeout` that says
which pools were full. While held, slots are renewed every third of their
lease on threads of the guard's own (`engine.runtime.holds`), so a step that blocks
its thread or its event loop cannot starve its own lease; and a hold is
given up (`lost`) before the store could find its lease expired, without
waiting for a renewal blocked in an outage.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import threading
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from tidegate.domain.clock import SYSTEM_CLOCK, Clock
from tidegate.domain.durations import format_duration
from tidegate.domain.errors import PoolClaimTimeout, StepFencedOut
from tidegate.domain.steps import SlotGrant, SlotRequest
from tidegate.domain.tunables import default_seconds
from tidegate.engine.runtime.holds import Handed, Renewer, SlotHold
from tidegate.storage.port import Fence, Listener, Store

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ClaimPolicy:
    """How long to wait for slots and how often to look again without a wake-up (seconds)."""

    timeout: float = default_seconds("TIDEGATE_CLAIM_TIMEOUT")
    poll_interval: float = default_seconds("TIDEGATE_CLAIM_POLL_INTERVAL")
    poll_jitter: float = default_seconds("TIDEGATE_CLAIM_POLL_JITTER")


class _Wakeups:
    """One store subscription shared by every waiter of a guard, on whichever event loop it waits.

    A generation counter closes the gap between a refused try and the wait:
    a waiter that saw generation g before trying waits only while it is still g.
    """

    def __init__(self, store: Store) -> None:
        self._store = store
        self._lock = threading.Lock()
        self._generation = 0
        self._loops: set[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = set()
        self._listener: Listener | None = None

    @property
    def listening(self) -> bool:
        return self._listener is not None

    def listen(self) -> None:
        """Subscribe on first use (PostgreSQL waits here for its LISTEN to be in place)."""
        with self._lock:
            if self._listener is None:
                self._listener = self._store.listen(self._woken)

    @property
    def generation(self) -> int:
        with self._lock:
            return self._generation

    def _woken(self) -> None:
        with self._lock:
            self._generation += 1
            waiters = list(self._loops)
        for loop, event in waiters:
            with contextlib.suppress(RuntimeError):  # that loop has closed; its waiter is gone
                loop.call_soon_threadsafe(event.set)

    async def wait_async(self, seen: int, pause: float, also: asyncio.Future[Any] | None = None) -> None:
        """Wait for a wake-up after generation `seen`, or for `also` to be done, at most `pause` seconds."""
        event = asyncio.Event()
        entry = (asyncio.get_running_loop(), event)
        with self._lock:
            if self._generation != seen:
                return
            self._loops.add(entry)
        woken = asyncio.ensure_future(event.wait())
        try:
            awaited = [woken] if also is None else [woken, also]
            await asyncio.wait(awaited, timeout=pause, return_when=asyncio.FIRST_COMPLETED)
        finally:
            woken.cancel()
            with self._lock:
                self._loops.discard(entry)

    def close(self) -> None:
        with self._lock:
            listener, self._listener = self._listener, None
        if listener is not None:
            listener.close()


class PoolGuard:
    """Acquire (wait for a wake-up, poll as the fallback, give up at the timeout), renew, release.

    One guard serves a whole worker: it shares one store subscription and its
    renewal threads between every step that waits or holds slots. Deadlines and
    lease send times are read from `clock` (the worker's), so a test that
    advances it sees acquires time out and holds lapse; waits still run on real time.
    """

    def __init__(
        self,
        store: Store,
        policy: ClaimPolicy | None = None,
        *,
        jitter: Callable[[], float] = random.random,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._store = store
        self._policy = policy or ClaimPolicy()
        self._jitter = jitter
        self.clock = clock  # also read by the steps that hand slots on (`workflow.slots`)
        self._wakeups = _Wakeups(store)
        self._renewer = Renewer(store, clock)

    # --- acquiring ----------------------------------------------------------------------

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
        rates: Mapping[str, int] | None = None,
    ) -> SlotHold:
        """Wait, without blocking the event loop, until every slot of `needs` ({scope: slots}) is held
        and `rates` ({named rate: cost}) are paid, in one transaction, all or none.

        `handed` is resolved when another step of the run hands its slots to
        this one (`Store.finish_step`), or when a batch granted them
        (`Store.acquire_many`): then no try is needed. `full_at` is a
        wake-up generation at which the store said a request like this one
        would be refused; while nothing has woken the guard since, the first
        try is skipped (it would only be refused).

        A step held back by a named rate sleeps until the time the store says
        the rate allows it (or a wake-up: a release, a refund, a raised rate),
        not for a poll interval, and holds no slot meanwhile.

        Raises PoolRequestTooLarge (RateNotFound, RateCostTooLarge) at once for a
        request no limit can satisfy, PoolClaimTimeout after the policy's
        timeout, StepFencedOut if the attempt no longer owns its run.
        """
        deadline = self.clock.monotonic() + self._policy.timeout
        if not self._wakeups.listening:
            await asyncio.to_thread(self._wakeups.listen)
        grant: SlotGrant | None = None
        while True:
            if handed is not None and handed.done():
                return self._held(fence, step_key, needs, handed.result())
            seen = self._wakeups.generation
            if seen != full_at:
                sent = self.clock.monotonic()
                grant = await self._try(fence, worker_id, step_key, needs, fixed_limits or {}, rates or {})
                if grant.granted:
                    return self._held(fence, step_key, needs, Handed.leased(grant, sent))
            full_at = None  # skipped once at most: a wake-up or the poll leads to a try
            await self._wakeups.wait_async(seen, self._pause(fence, step_key, grant, deadline), also=handed)

    def generation(self) -> int:
        """The wake-up generation now: pass it as `full_at` when the store says a request is refused."""
        return self._wakeups.generation

    async def _try(
        self,
        fence: Fence,
        worker_id: str,
        step_key: str,
        needs: Mapping[str, int],
        fixed_limits: Mapping[str, int],
        rates: Mapping[str, int],
    ) -> SlotGrant:
        """One try on a thread; cancelled meanwhile, it lets the try finish and gives back what it got.

        Abandoning the thread's transaction instead could leave slots granted
        to no one, pinned until their lease expired.
        """
        request = SlotRequest(step_key, needs, fixed_limits, rates)
        call = asyncio.ensure_future(asyncio.to_thread(self._store.acquire_slots, fence, worker_id, request))
        try:
            return await asyncio.shield(call)
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):  # the cancel is what the caller must see
                if (await call).granted:
                    await asyncio.to_thread(self._store.release_slots, fence, step_key)
            raise

    def _held(self, fence: Fence, step_key: str, needs: Mapping[str, int], handed: Handed) -> SlotHold:
        hold = SlotHold(fence, step_key, dict(needs), handed.grant.lease_seconds, handed.safe_until)
        self._renewer.add(hold)
        return hold

    def _pause(self, fence: Fence, step_key: str, grant: SlotGrant | None, deadline: float) -> float:
        """How long to wait for a wake-up before trying again; raises when there is no point."""
        grant = grant or SlotGrant(False)
        if grant.fenced_out:
            raise StepFencedOut(
                f"step {step_key}: run {fence[0]} attempt {fence[1]} was taken over; its slots are not claimed"
            )
        left = deadline - self.clock.monotonic()
        if left <= 0:
            raise PoolClaimTimeout(_timeout_message(step_key, self._policy.timeout, grant))
        poll = self._policy.poll_interval + self._jitter() * self._policy.poll_jitter
        if grant.rate_wait is not None:  # the store said when the rate allows it: no sooner, no later
            poll = min(poll, grant.rate_wait.retry_in)
        return min(left, poll)

    # --- releasing ----------------------------------------------------------------------

    def release(self, hold: SlotHold) -> None:
        """Give the slots back (waking whoever waits for them); safe to call twice."""
        self._renewer.discard(hold)
        self._store.release_slots(hold.fence, hold.step_key)

    def forget(self, hold: SlotHold) -> None:
        """Stop renewing a hold the store already freed (recording a step finished frees its
        slots in the same transaction), saving the release's write transaction."""
        self._renewer.discard(hold)

    async def release_async(self, hold: SlotHold) -> None:
        self._renewer.discard(hold)
        await asyncio.to_thread(self._store.release_slots, hold.fence, hold.step_key)

    @asynccontextmanager
    async def holding_async(
        self,
        fence: Fence,
        worker_id: str,
        step_key: str,
        needs: Mapping[str, int],
        fixed_limits: Mapping[str, int] | None = None,
    ) -> AsyncIterator[SlotHold]:
        """`async with guard.holding_async(...)`: the slots are held for the block and released after it."""
        hold = await self.acquire(fence, worker_id, step_key, needs, fixed_limits)
        try:
            yield hold
        finally:
            await self.release_async(hold)

    def close(self) -> None:
        """Stop the subscription and the renewal thread (held slots then lapse unless released)."""
        self._wakeups.close()
        self._renewer.close()


def _timeout_message(step_key: str, timeout: float, grant: SlotGrant) -> str:
    if grant.rate_wait is not None:
        wait = grant.rate_wait
        return (
            f"step {step_key} gave up waiting for rate {wait.rate!r} ({wait.label}) after "
            f"{format_duration(timeout)} (TIDEGATE_CLAIM_TIMEOUT)"
        )
    full = ", ".join(f"pool {use.name!r} ({use.used}/{use.limit} claimed)" for use in grant.blocking) or "its pools"
    return (
        f"step {step_key} gave up waiting for pool slots after {format_duration(timeout)} "
        f"(TIDEGATE_CLAIM_TIMEOUT): still full: {full}"
    )
