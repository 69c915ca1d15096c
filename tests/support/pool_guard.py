"""Slots of a `PoolGuard` taken from a plain thread: `acquire_sync`, and `with holding(guard, ...)`.

Only tests hold slots from synchronous code (the orchestrator awaits `PoolGuard.acquire`
on the worker's event loop), so these live with them rather than in `src/`. Each runs the
guard's own `acquire` on an event loop of its call, so a test exercises the path steps take.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from tidegate.engine.runtime.holds import SlotHold
from tidegate.engine.runtime.pools import PoolGuard
from tidegate.storage.port import Fence


def acquire_sync(
    guard: PoolGuard,
    fence: Fence,
    worker_id: str,
    step_key: str,
    needs: Mapping[str, int],
    fixed_limits: Mapping[str, int] | None = None,
) -> SlotHold:
    """Block until every slot of `needs` is held (all or none); see `PoolGuard.acquire`."""
    return asyncio.run(guard.acquire(fence, worker_id, step_key, needs, fixed_limits))


@contextmanager
def holding(
    guard: PoolGuard,
    fence: Fence,
    worker_id: str,
    step_key: str,
    needs: Mapping[str, int],
    fixed_limits: Mapping[str, int] | None = None,
) -> Iterator[SlotHold]:
    """The slots of `needs` are held for the block (all or none) and released after it."""
    hold = acquire_sync(guard, fence, worker_id, step_key, needs, fixed_limits)
    try:
        yield hold
    finally:
        guard.release(hold)
