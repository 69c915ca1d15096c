"""Backpressure rules: how long runs take (a pace), the admission ceiling's retry hint, why's ETA, the fill order.

Pure functions: the store supplies counts and durations read on its clock.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

RATE_WINDOW_SECONDS = 60.0  # what counts as a recent end
HISTORY_RUNS = 20  # the older ends a pace falls back on when none is recent
MAX_RETRY_AFTER = 3600
ETA_RESOLUTION = 0.1  # seconds: an ETA is rounded to this, and never below it


@dataclass(frozen=True)
class Pace:
    """How long the runs of a scope take, as the store saw them on its clock (seconds).

    Durations, not a count of ends per window: a count divided by a fixed window
    reads far too slow while the window is not yet full of history (a backlog's
    first minute), while a duration is right from the first end.
    """

    ended: int = 0  # runs ended within the recent window (after a start)
    ended_seconds: float = 0.0  # their total time from start to end
    running: int = 0  # runs started and not yet ended
    running_seconds: float = 0.0  # their total time so far: each a lower bound on its duration
    earlier_seconds: float | None = None  # the mean duration of the last ends before the window (history)


def run_seconds(pace: Pace) -> float | None:
    """The best estimate of how long one run holds its slot; None when nothing is known.

    Recent ends first (their mean duration). Before any: the runs in flight have
    already run their mean elapsed time, a lower bound, and the scope's history
    says how long its runs took before; the larger of the two is the better
    guess (a history shorter than what is already running is out of date).
    """
    if pace.ended > 0:
        return pace.ended_seconds / pace.ended
    known = [] if pace.earlier_seconds is None else [pace.earlier_seconds]
    if pace.running > 0:
        known.append(pace.running_seconds / pace.running)
    return max(known) if known else None


def eta_seconds(ends_needed: int, parallel: int, pace: Pace) -> float | None:
    """Seconds until a blocked run should get its slot: `ends_needed` runs of the blocking scope
    (those ahead of it needing the scope, and its own slot) must end, `parallel` at a time.

    The scope frees a slot every `duration / parallel` on average, and the next
    one about half such a gap after the question. None when no duration is known
    or the scope takes no run at all (limit 0): a guess would mislead.
    """
    seconds = run_seconds(pace)
    if seconds is None or parallel <= 0 or ends_needed <= 0:
        return None
    return max(ETA_RESOLUTION, round((ends_needed - 0.5) * seconds / parallel, 1))


def retry_after(active: int, limit: int, incoming: int, pace: Pace, window: float = RATE_WINDOW_SECONDS) -> int:
    """Seconds until enough runs should have ended for `incoming` more to fit under `limit`.

    The excess must end, as many at a time as run now, each taking the best
    known duration (`run_seconds`). Only when nothing at all is known (no run
    ended, none running, no history) is the drain taken as slower than one run
    per window, so the hint is never shorter than for a slow drain.
    """
    excess = max(1, active + incoming - limit)
    seconds = run_seconds(pace)
    wait = excess * window + 1 if seconds is None else excess * seconds / max(pace.running, 1)
    return max(1, min(MAX_RETRY_AFTER, math.ceil(wait)))


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
