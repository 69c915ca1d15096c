"""A run's pool slots: one step at a time asks per set of pools, and slots handed on.

Many steps of one run often wait for the same pool (200 items behind a pool
of 4). Were each to wait in the guard, every release would wake them all to
race for one slot in the database. Instead the run's steps queue here, in
the order they became ready, per set of slots they need (a *line*), and only
the longest-waiting one asks the guard. Steps that join a line already taken
ask the store once, all together in one transaction (`Store.acquire_many`):
those that fit are granted and do not queue (slots held behind the queue
could starve it), the others are marked waiting, so every waiting step is
visible (StepSlotWaiting, `pools list` pending). Waiting here holds no
executor slot.

When a step finishes, its slots go to the longest-waiting step of its line:

- *in memory*, unless the store's last answer for the line was that another
  run waits for these pools or one is over its limit: the waiter starts at
  once on the finished step's slots, and the transaction that records the
  finished step moves its holder rows to the waiter (`finish_step` with
  `successor_started`). The sum of slots in use never changes, so every
  limit holds; which step the rows name catches up a moment later. The
  waiter waits for that write to land before it writes anything itself.
- *by the store* otherwise: the transaction that records the finished step
  grants the waiter if it fits and nobody else waits; else the slots are
  freed and waiters woken, and the waiter competes like any other asker.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from tidegate.domain.errors import StepFencedOut
from tidegate.domain.steps import FinishStepRequest, SlotGrant, SlotRequest, StepFinish, StepStatus, StepUpdate
from tidegate.engine.runtime.holds import Handed, SlotHold
from tidegate.engine.runtime.pools import PoolGuard
from tidegate.storage.port import Fence, Store

log = logging.getLogger(__name__)

DISPATCH_WAIT = 0.01  # seconds a hand-off's write waits for the waiter to be on its way (an executor slot may be late)

LineKey = tuple[frozenset[tuple[str, int]], frozenset[tuple[str, int]], frozenset[tuple[str, int]]]


@dataclass(eq=False)
class _Waiter:
    """A step waiting in a line; `handed` is resolved when another step hands it slots."""

    request: SlotRequest
    started: StepUpdate  # how it is recorded running when it is handed slots in memory
    handed: asyncio.Future[Handed]
    on_its_way: asyncio.Future[None]  # its function was handed to the executor (or it gave up)


@dataclass(eq=False)
class _Line:
    waiters: deque[_Waiter] = field(default_factory=deque)  # in the order they became ready
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)  # held by the one waiter that asks the guard
    full_at: int | None = None  # wake-up generation at which a hand-off left these slots full
    shared: bool = False  # the store's last word: another run wants these pools, or one is over its limit

    def next_waiter(self) -> _Waiter | None:
        """The longest-waiting step not handed slots yet: whom a finishing step hands its slots to."""
        return next((waiter for waiter in self.waiters if not waiter.handed.done()), None)


@dataclass(eq=False)
class Held:
    """The slots one step holds through `RunSlots.holding` (None there when it needs none).

    `landing` is the write that moves the slots to this step when another
    step handed them over in memory; that write also recorded this step
    running, so it writes no StepStarted of its own.
    """

    hold: SlotHold
    line: _Line
    landing: asyncio.Future[None] | None = None
    on_its_way: asyncio.Future[None] | None = None

    @property
    def started_recorded(self) -> bool:
        return self.landing is not None

    def dispatched(self) -> None:
        """Its function is on its way to the executor: a step that handed it these slots records now."""
        if self.on_its_way is not None and not self.on_its_way.done():
            self.on_its_way.set_result(None)

    def lost(self) -> asyncio.Future[None]:
        """Resolved if a renewal finds these slots gone (the lease expired and was swept, or the run
        was taken over): the step then runs on slots that may be someone else's."""
        loop = asyncio.get_running_loop()
        lost: asyncio.Future[None] = loop.create_future()

        def resolve() -> None:
            if not lost.done():
                lost.set_result(None)

        def resolve_on_loop() -> None:  # called on the renewer's thread
            loop.call_soon_threadsafe(resolve)

        self.hold.on_lost.append(resolve_on_loop)
        if self.hold.lost.is_set():
            resolve()
        return lost

    async def settled(self) -> None:
        """Wait until the store agrees this step holds its slots: before anything it writes."""
        if self.landing is not None:
            await asyncio.shield(self.landing)


class RunSlots:
    """The pool slots of one run's steps, asked for and handed on (one per attempt: the fence is the attempt's)."""

    def __init__(self, guard: PoolGuard, store: Store, fence: Fence, worker_id: str) -> None:
        self._guard = guard
        self._store = store
        self._fence = fence
        self._worker_id = worker_id
        self._lines: dict[LineKey, _Line] = {}
        self._asks: list[SlotRequest] = []
        self._answers: asyncio.Future[list[Handed] | None] | None = None  # the batch being gathered
        self._landings: dict[str, asyncio.Future[None]] = {}  # step key -> the write moving slots to it
        self._holding: set[str] = set()  # steps holding slots acquired through here
        self._releasing: set[asyncio.Task[None]] = set()  # the loop keeps only weak references to tasks

    @asynccontextmanager
    async def holding(
        self,
        started: StepUpdate,
        needs: Mapping[str, int],
        fixed_limits: Mapping[str, int],
        rates: Mapping[str, int] | None = None,
    ) -> AsyncIterator[Held | None]:
        """Hold `needs` ({scope: slots}) for the block, which ends by `finish` (recording the step's
        outcome frees or hands on its slots); released if the block raises or is cancelled. `rates`
        ({named rate: cost}) are paid in the transaction that takes the slots, all or none; a release
        before the step started gives them back."""
        rates = dict(rates or {})
        if not needs and not rates:
            yield None
            return
        step_key = started.step_key
        request = SlotRequest(step_key, dict(needs), dict(fixed_limits), rates)
        key = (frozenset(needs.items()), frozenset(fixed_limits.items()), frozenset(rates.items()))
        line = self._lines.setdefault(key, _Line())
        asked = await self._ask_once(request) if line.waiters or line.lock.locked() else None
        if asked is not None and asked.grant.granted:
            hold = await self._guard.acquire(
                self._fence, self._worker_id, step_key, needs, fixed_limits, handed=_resolved(asked), rates=rates
            )
            held = Held(hold, line)
        else:
            waiter = _Waiter(request, started, *_futures(2))
            hold = await self._wait_in_line(line, waiter)
            held = Held(hold, line, self._landings.pop(step_key, None), waiter.on_its_way)
        self._holding.add(step_key)
        try:
            yield held
        except BaseException:
            held.dispatched()
            # Failed or cancelled (a cancelled task cannot wait here): give the slots back in the
            # background. A run that ends frees every slot of its steps anyway.
            self._holding.discard(step_key)
            self._release_later(step_key, held.landing, hold)
            raise
        held.dispatched()
        self._holding.discard(step_key)
        # `finish` recorded the step's outcome, which freed (or handed on) its slots in the same
        # transaction: only the renewal is left to stop.
        self._guard.forget(hold)

    async def finish(self, held: Held | None, update: StepUpdate, hand_on: bool = True) -> StepFinish:
        """Record a step's outcome (`Store.finish_step`), handing its slots to the next waiter of its
        line unless not `hand_on` (the run stopped dispatching: they are freed for other runs).

        A waiter that pays named rates is never handed slots in memory: its tokens must be taken
        with the slots in the store's transaction, so the store decides (and, the rate refusing,
        frees the slots for everyone rather than keep them for a step that cannot start)."""
        if held is None:
            return await self._call_finish(update, None, None)
        await held.settled()
        line = held.line
        waiter = line.next_waiter() if hand_on else None
        if (
            waiter is not None
            and update.status is StepStatus.COMPLETED
            and not line.shared
            and not waiter.request.rates
            and not held.hold.lost.is_set()
        ):
            return await self._hand_on(held, waiter, update)
        successor = None if waiter is None else waiter.request
        generation = self._guard.generation()
        sent = self._guard.clock.monotonic()  # a grant to the successor is leased no earlier than this
        finish = await self._call_finish(update, successor, None)
        if waiter is None or not finish.recorded:
            return finish
        line.shared = finish.shared
        if finish.handed is not None:
            if not waiter.handed.done():
                waiter.handed.set_result(Handed.leased(finish.handed, sent))
                if finish.full:
                    line.full_at = generation
            elif waiter.request.step_key not in self._holding:
                # It stopped waiting (cancelled) while these slots were being handed to it: give them back.
                self._release_later(waiter.request.step_key, None, None)
        return finish

    async def _hand_on(self, held: Held, waiter: _Waiter, update: StepUpdate) -> StepFinish:
        """Give the waiter these slots now; the write recording `update` moves them to it in the store."""
        landing: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        landing.add_done_callback(_retrieve)
        self._landings[waiter.request.step_key] = landing
        # Its holder rows are these slots' until the write lands, which leases them anew: the
        # waiter may use them until this step could.
        waiter.handed.set_result(Handed(SlotGrant(True, [], held.hold.lease_seconds), held.hold.safe_until))
        # The line had a waiter, so these slots were full for it, and handing them on frees none: the
        # step queued next need not ask before something wakes the guard.
        generation = held.line.full_at = self._guard.generation()
        # The waiter's start comes first: the write's thread would compete with its dispatch.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(waiter.on_its_way), DISPATCH_WAIT)
        try:
            finish = await self._call_finish(update, waiter.request, waiter.started)
        except BaseException as error:
            landing.set_exception(StepFencedOut(f"the hand-off to {waiter.request.step_key} failed: {error}"))
            raise
        if not finish.recorded:
            landing.set_exception(StepFencedOut(f"run {self._fence[0]} attempt {self._fence[1]} was taken over"))
            return finish
        landing.set_result(None)
        held.line.shared = finish.shared
        if not finish.full and held.line.full_at == generation:
            held.line.full_at = None  # room after all (a limit raised meanwhile): the next one asks
        if finish.handed is None:
            log.warning(
                "step %s of run %s started on pool slots step %s no longer held (its lease had expired)",
                waiter.request.step_key,
                self._fence[0],
                update.step_key,
            )
        return finish

    async def _call_finish(
        self, update: StepUpdate, successor: SlotRequest | None, started: StepUpdate | None
    ) -> StepFinish:
        request = FinishStepRequest(self._fence, self._worker_id, update, successor, started)
        return await asyncio.to_thread(self._store.finish_step, request)

    async def _wait_in_line(self, line: _Line, waiter: _Waiter) -> SlotHold:
        """Queue in the line until a finishing step hands this one its slots; meanwhile the
        longest-waiting step of the line asks the guard (a hand-off answers it too)."""
        request = waiter.request
        line.waiters.append(waiter)
        ask = self._guard.acquire
        fence, worker_id = self._fence, self._worker_id
        try:
            if await _first_in_line(line, waiter):
                try:
                    full_at, line.full_at = line.full_at, None
                    return await ask(
                        fence,
                        worker_id,
                        request.step_key,
                        request.needs,
                        request.fixed_limits,
                        handed=waiter.handed,
                        full_at=full_at,
                        rates=request.rates,
                    )
                finally:
                    line.lock.release()
            # Handed its slots while queued: no store call.
            return await ask(
                fence,
                worker_id,
                request.step_key,
                request.needs,
                request.fixed_limits,
                handed=waiter.handed,
                rates=request.rates,
            )
        except BaseException:
            waiter.on_its_way.set_result(None)
            if waiter.handed.done() and not waiter.handed.cancelled():
                # Handed slots just as it stopped waiting: give them back.
                self._release_later(request.step_key, self._landings.pop(request.step_key, None), None)
            else:
                waiter.handed.cancel()
            raise
        finally:
            line.waiters.remove(waiter)

    def _release_later(self, step_key: str, landing: asyncio.Future[None] | None, hold: SlotHold | None) -> None:
        """Give a step's slots back in the background, once a hand-off moving them to it has landed."""

        async def release() -> None:
            if landing is not None:
                with contextlib.suppress(BaseException):
                    await landing
            if hold is not None:
                await asyncio.to_thread(self._guard.release, hold)
            else:
                await asyncio.to_thread(self._store.release_slots, self._fence, step_key)

        task = asyncio.ensure_future(release())
        self._releasing.add(task)
        task.add_done_callback(self._releasing.discard)

    async def _ask_once(self, request: SlotRequest) -> Handed:
        """Join the batch of requests this event-loop iteration gathers; one store transaction answers them all."""
        index = len(self._asks)
        self._asks.append(request)
        if self._answers is None:
            self._answers = asyncio.ensure_future(self._answer_asks())
        grants = await asyncio.shield(self._answers)
        if grants is None:
            raise StepFencedOut(
                f"step {request.step_key}: run {self._fence[0]} attempt {self._fence[1]} was taken over"
            )
        return grants[index]

    async def _answer_asks(self) -> list[Handed] | None:
        await asyncio.sleep(0)  # let every step made ready in this event-loop iteration join the batch
        asks, self._asks, self._answers = self._asks, [], None
        sent = self._guard.clock.monotonic()
        grants = await asyncio.to_thread(self._store.acquire_many, self._fence, self._worker_id, asks)
        return None if grants is None else [Handed.leased(grant, sent) for grant in grants]


async def _first_in_line(line: _Line, waiter: _Waiter) -> bool:
    """Wait until the waiter is handed slots (False) or is the one to ask the guard (True: it then
    holds the line's lock)."""
    locking = asyncio.ensure_future(line.lock.acquire())
    either: list[asyncio.Future[Any]] = [locking, waiter.handed]
    try:
        await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:
        _drop_lock(line.lock, locking)
        raise
    if waiter.handed.done():
        _drop_lock(line.lock, locking)
        return False
    return True


def _drop_lock(lock: asyncio.Lock, locking: asyncio.Future[Any]) -> None:
    """Stop waiting for `lock`; release it if the wait had already got it."""
    if not locking.cancel() and not locking.cancelled() and locking.exception() is None:
        lock.release()


def _futures(count: int) -> list[asyncio.Future[Any]]:
    loop = asyncio.get_running_loop()
    return [loop.create_future() for _ in range(count)]


def _resolved(handed: Handed) -> asyncio.Future[Handed]:
    future: asyncio.Future[Handed] = asyncio.get_running_loop().create_future()
    future.set_result(handed)
    return future


def _retrieve(future: asyncio.Future[None]) -> None:
    """Mark a landing's failure as seen: the step it was for may be gone (its run fenced out)."""
    if not future.cancelled():
        future.exception()
