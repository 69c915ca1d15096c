"""A run's pool claims: one claimer at a time per set of pools, through the PoolGuard.

Many steps of one run often wait for the same pool (200 items behind a pool
of 4). Were each to wait in the guard, every release would wake them all to
race for one slot in the database. Instead the run's steps queue here, in
the order they became ready, per set of pools they need, and only the head
of each queue waits in the guard; the next one asks as soon as the head is
granted. A step that joins a queue asks the store once first, so every
waiting step is visible (StepSlotWaiting, `pools list` pending), not only the
heads. Waiting here holds no executor slot.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from tidegate.domain.errors import StepFencedOut
from tidegate.storage.port import Fence, Store

if TYPE_CHECKING:
    from tidegate.engine.pools import PoolGuard


class SlotClaims:
    """The pool claims of one run's steps (one per attempt: the fence is the attempt's)."""

    def __init__(self, guard: PoolGuard, store: Store, fence: Fence, worker_id: str) -> None:
        self._guard = guard
        self._store = store
        self._fence = fence
        self._worker_id = worker_id
        self._turns: dict[frozenset[tuple[str, int]], asyncio.Lock] = {}

    @asynccontextmanager
    async def holding(self, step_key: str, needs: Mapping[str, int], fixed_limits: Mapping[str, int]) -> AsyncIterator[None]:
        """Hold `needs` ({scope: slots}) for the block, which records the step's outcome (freeing them);
        released if the block raises or is cancelled instead."""
        if not needs:
            yield
            return
        turn = self._turns.setdefault(frozenset(needs.items()), asyncio.Lock())
        # Another step of this run already waits for these pools: ask the store once anyway, so this
        # one too is seen waiting (StepSlotWaiting, `pools list` pending) while it queues. A step
        # granted by that try must not queue: slots held behind the head could starve the head.
        if turn.locked() and await self._granted_at_once(step_key, needs, fixed_limits):
            # Held already: the guard grants it again at once, and renews it from now on.
            claim = await self._guard.acquire(self._fence, self._worker_id, step_key, needs, fixed_limits)
        else:
            async with turn:  # asyncio.Lock wakes its waiters first come, first served
                claim = await self._guard.acquire(self._fence, self._worker_id, step_key, needs, fixed_limits)
        try:
            yield
        except BaseException:
            # Failed or cancelled (a cancelled task cannot wait here): give the slots back in the
            # background. A run that ends frees every slot of its steps anyway.
            asyncio.get_running_loop().run_in_executor(None, self._guard.release, claim)
            raise
        # The block recorded the step's outcome, which freed its slots in the same transaction
        # (and woke their waiters): only the renewal is left to stop.
        self._guard.forget(claim)

    async def _granted_at_once(self, step_key: str, needs: Mapping[str, int], fixed_limits: Mapping[str, int]) -> bool:
        """One try in the store: True if it granted every slot (then held, not yet renewed)."""
        grant = await asyncio.to_thread(
            self._store.acquire_slots, self._fence, self._worker_id, step_key, needs, fixed_limits
        )
        if grant.fenced_out:
            raise StepFencedOut(f"step {step_key}: run {self._fence[0]} attempt {self._fence[1]} was taken over")
        return grant.granted
