"""`with holding(guard, ...)`: slots of a `PoolGuard` held for a block, from a plain thread.

Only tests hold slots around a block of synchronous code (the orchestrator uses
`PoolGuard.holding_async`), so this lives with them rather than in `src/`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from tidegate.engine.claims import SlotClaim
from tidegate.engine.pools import PoolGuard
from tidegate.storage.port import Fence


@contextmanager
def holding(
    guard: PoolGuard,
    fence: Fence,
    worker_id: str,
    step_key: str,
    needs: Mapping[str, int],
    fixed_limits: Mapping[str, int] | None = None,
) -> Iterator[SlotClaim]:
    """The slots of `needs` are held for the block (all or none) and released after it."""
    claim = guard.acquire_sync(fence, worker_id, step_key, needs, fixed_limits)
    try:
        yield claim
    finally:
        guard.release(claim)
