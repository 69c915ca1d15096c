"""Backpressure rules: the admission ceiling's retry hint and the fill order.

Pure functions: the store supplies counts read in its transaction.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

RATE_WINDOW_SECONDS = 60.0
MAX_RETRY_AFTER = 3600


def retry_after(active: int, limit: int, incoming: int, completed_recently: int, window: float = RATE_WINDOW_SECONDS) -> int:
    """Seconds until enough runs should have finished for `incoming` more to fit under `limit`.

    Estimated from the queue's recent completion rate (`completed_recently`
    runs finished in the last `window` seconds) and the backlog ahead; with
    no recent completion there is no evidence of draining, so a whole window.
    """
    excess = max(1, active + incoming - limit)
    if completed_recently <= 0:
        return int(window)
    rate = completed_recently / window
    return max(1, min(MAX_RETRY_AFTER, math.ceil(excess / rate)))


@dataclass(frozen=True)
class WorkerSlot:
    """A live worker as the fill order sees it."""

    id: str
    rank: int
    capacity: int
    running: int
    queues: frozenset[str]


def may_claim(me: WorkerSlot, others: Sequence[WorkerSlot]) -> bool:
    """Leaky-bucket fill order: claim only when every lower-ranked worker sharing a queue is full.

    Load concentrates on the lowest ranks; higher ranks stay idle (and may
    exit with --max-idle) until a burst fills the ones below them.
    """
    return all(
        other.running >= other.capacity
        for other in others
        if other.rank < me.rank and other.queues & me.queues
    )


def lowest_free_rank(taken: Sequence[int]) -> int:
    """A new worker's rank: the smallest not held by a live worker (stable while it lives)."""
    used = set(taken)
    rank = 0
    while rank in used:
        rank += 1
    return rank
