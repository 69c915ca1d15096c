"""Where a run goes next: the status transitions both stores apply, written once.

Each adapter computes the rows it writes with these functions; where the
PostgreSQL adapter keeps a set-based statement for speed (the cycle, the
sweep, the submit), tests/contract/test_transitions_pinned.py holds its SQL
to the same answers on generated cases.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal

from tidegate.domain.backpressure import Pace, retry_after
from tidegate.domain.errors import AdmissionRejected
from tidegate.domain.integers import grown
from tidegate.domain.scopes import Rules

QUEUED = "queued"
FAILED = "failed"
CANCELED = "canceled"


SNOOZED = "snoozed"  # an outcome kind only (`raise Snooze`): the run takes QUEUED


def outcome_status(kind: str, retry_delay: float | None) -> str:
    """The status an attempt's outcome asks for: a failure with a retry delay, and a snooze, go back
    to the queue."""
    if (kind == FAILED and retry_delay is not None) or kind == SNOOZED:
        return QUEUED
    return kind


def settle(status: str, cancel_requested: bool) -> str:
    """The status a run really takes: a requested cancel wins over a retry, a failure or a
    hand-back (the run must not run again), never over a completion."""
    if cancel_requested and status in (QUEUED, FAILED):
        return CANCELED
    return status


RETRYABLE = frozenset({FAILED, CANCELED})


def may_retry(status: str) -> bool:
    """Whether an operator may give a run a new attempt: only one that ended without success.

    A completed run has its result and a queued or running one has attempts
    in hand; retrying those would run the task twice for one request.
    """
    return status in RETRYABLE


def retried_max_attempts(max_attempts: int) -> int:
    """The attempts budget after a manual retry: one more than before, so the run can run
    again even when its failure used up every attempt it had."""
    return grown(max_attempts)


def attempts_left(attempt: int, max_attempts: int) -> bool:
    """Whether a run that just used `attempt` (1-based) may run again; else it ends failed."""
    return attempt < max_attempts


def lost_attempt_error(lapsed: bool, attempt: int, max_attempts: int) -> str:
    """The error of a run failed by the sweep: its last attempt was lost with its worker."""
    if lapsed:
        return f"lease expired: the worker stopped renewing it (attempt {attempt} of {max_attempts})"
    return f"orphaned: its worker is gone (attempt {attempt} of {max_attempts})"


def deadline_error(waited_seconds: float) -> str:
    """The error of a queued run failed past its dispatch deadline.

    Whole seconds rounded half away from zero, as SQL's round() does on both
    databases (Python's round() would round half to even).
    """
    waited = Decimal(repr(waited_seconds)).quantize(Decimal(1), ROUND_HALF_UP)
    return (
        f"capacity: still queued {waited}s after submission, past its dispatch deadline;"
        " no worker could take it in time"
    )


def has_room(used: int, limit: int | None, slots: int = 1) -> bool:
    """Whether a scope (a limit, a ceiling, a fan-out window) can take `slots` more.

    The one "is it full" rule: the claim decision, the candidate reads, `queue
    why` and the fan-out windows all ask it. No limit: always room.
    """
    return limit is None or used + slots <= limit


@dataclass(frozen=True)
class Ceiling:
    """A `max_active` ceiling a submitted batch meets: all queues (`queue` None) or one queue."""

    queue: str | None
    limit: int
    incoming: int  # runs of the batch it counts

    def refuses(self, active: int) -> bool:
        """Whether `incoming` more runs would push the active (queued + running) runs past it."""
        return not has_room(active, self.limit, self.incoming)

    def rejection(self, active: int, pace: Pace) -> AdmissionRejected:
        """What a refused submit raises: the ceiling, its count and when to try again."""
        where = "all queues" if self.queue is None else f"queue {self.queue}"
        hint = retry_after(active, self.limit, self.incoming, pace)
        return AdmissionRejected(where, active, self.limit, hint)


def ceilings_met(rules: Rules, queues: Sequence[str]) -> list[Ceiling]:
    """The ceilings a batch (the queue of each of its runs) meets, in the order they are
    checked: all queues first, then each queue as it first appears in the batch."""
    met: list[Ceiling] = []
    if rules.run_queue.max_active is not None:
        met.append(Ceiling(None, rules.run_queue.max_active, len(queues)))
    for queue, incoming in Counter(queues).items():  # in order of first appearance
        limit = rules.max_active(queue)
        if limit is not None:
            met.append(Ceiling(queue, limit, incoming))
    return met
