"""Retry policy: whether a failed attempt is retried, and after how long.

Exponential backoff with jitter spreads retries of runs that failed together
(a flapping dependency) instead of sending them back all at once.
"""

from __future__ import annotations

from tidegate.domain.transitions import attempts_left

MAX_BACKOFF_SECONDS = 3600.0


def retry_delay(attempt: int, max_attempts: int, base_seconds: float, jitter: float) -> float | None:
    """Seconds to wait before the next attempt, or None when attempts are exhausted.

    `attempt` is the 1-based attempt that just failed; `jitter` is a number in
    [0, 1) supplied by the caller (the domain draws no randomness itself), which
    scales the delay into [0.5, 1.5) of the exponential step.
    """
    if not attempts_left(attempt, max_attempts):
        return None
    step = base_seconds * (2.0 ** (attempt - 1))
    return min(MAX_BACKOFF_SECONDS, step * (0.5 + jitter))
