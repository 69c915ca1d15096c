"""Backpressure rules: the admission ceiling's retry hint and the fill order.

Pure functions: the store supplies counts read in its transaction.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

RATE_WINDOW_SECONDS = 60.0
MAX_RETRY_AFTER = 3600


def retry_after(
    active: int, limit: int, incoming: int, completed_recently: int, window: float = RATE_WINDOW_SECONDS
) -> int:
    """Seconds until enough runs should have finished for `incoming` more to fit under `limit`.

    Estimated from the queue's recent completion rate (`completed_recently`
    runs finished in the last `window` seconds) and the backlog ahead. With no
    recent completion the rate is taken as below one per window, so the hint
    is never shorter than for a slow drain.
    """
    excess = max(1, active + incoming - limit)
    rate = max(completed_recently, 1) / window
    wait = excess / rate
    if completed_recently <= 0:
        wait += 1  # strictly longer than any observed drain of the same backlog
    return max(1, min(MAX_RETRY_AFTER, math.ceil(wait)))


def eta_seconds(ahead: int, finished_recently: int, window: float = RATE_WINDOW_SECONDS) -> float | None:
    """Seconds until a blocked run should get its slot: `ahead + 1` slots of the blocking scope
    must free up, at the rate its runs ended over the last `window` seconds.

    None when none ended in the window: there is no rate to go by, and a
    guess (unlike the admission hint, which must say something) would mislead.
    """
    if finished_recently <= 0:
        return None
    return round((ahead + 1) * window / finished_recently, 1)


@dataclass(frozen=True)
class WorkerSlot:
    """A live worker as the fill order sees it."""

    id: str
    rank: int
    capacity: int
    running: int
    queues: frozenset[str]


def claimable_queues(me: WorkerSlot, others: Sequence[WorkerSlot]) -> frozenset[str]:
    """Leaky-bucket fill order, per queue: claim from a queue only when every lower-ranked
    worker serving that queue is full.

    Load concentrates on the lowest ranks; higher ranks stay idle (and may
    exit with --max-idle) until a burst fills the ones below them. Judged per
    queue, so a queue no lower rank serves is never stranded.
    """
    lower = [other for other in others if other.rank < me.rank and other.running < other.capacity]
    return frozenset(queue for queue in me.queues if not any(queue in other.queues for other in lower))


def lowest_free_rank(taken: Sequence[int]) -> int:
    """A new worker's rank: the smallest not held by a live worker (stable while it lives)."""
    used = set(taken)
    rank = 0
    while rank in used:
        rank += 1
    return rank
