"""How an attempt's ending becomes the outcome the store records.

A value completes the run unless it cannot be stored; an error fails it
(with a retry delay while attempts remain) unless the worker had asked the
attempt to stop, in which case the reason it asked decides: a cancel cancels,
a timeout fails with the timeout's text. A `Snooze` queues the run again,
uncharged, until it has snoozed `max_snoozes` times: the next one fails it.
"""

from __future__ import annotations

import random
from typing import Any

from tidegate.domain.errors import InvalidArgument
from tidegate.domain.jsonvalue import ensure_payload
from tidegate.domain.model import Outcome, OutcomeKind
from tidegate.domain.retry import retry_delay
from tidegate.domain.snooze import DEFAULT_MAX_SNOOZES, Snooze, snooze_limit_error
from tidegate.worker.execution import Attempt, describe_error


def for_value(attempt: Attempt, value: Any, max_payload: int) -> Outcome:
    if attempt.context.cancelled and attempt.stop_reason == "canceled":
        return canceled(attempt)
    try:
        ensure_payload(value, "result", max_payload)
    except InvalidArgument as error:  # the task's value, not our code, is at fault: no traceback
        return failure(attempt, f"InvalidResult: {error}")
    run = attempt.run
    return Outcome(run.id, run.attempt, OutcomeKind.COMPLETED, result=value, has_parent=run.has_parent)


def for_error(attempt: Attempt, error: BaseException) -> Outcome:
    reason = attempt.stop_reason
    if reason == "canceled":
        return canceled(attempt)
    if reason == "timeout":
        return failure(attempt, f"Timeout: the attempt ran longer than {attempt.run.timeout}s")
    kinds = () if attempt.task is None else attempt.task.overloaded_by.get(attempt.run.queue, ())
    return failure(attempt, describe_error(error), overloaded=isinstance(error, kinds))


def for_snooze(attempt: Attempt, snooze: Snooze, now: float) -> Outcome:
    """`raise Snooze(delay)`: queued again after the delay (from `now`, the worker's wall clock, for an
    HTTP date), or failed once the run has snoozed its task's `max_snoozes` times. An attempt the
    worker had asked to stop ends as that stop says."""
    if attempt.stop_reason is not None:
        return for_error(attempt, snooze)
    run = attempt.run
    limit = DEFAULT_MAX_SNOOZES if attempt.task is None else attempt.task.max_snoozes
    if run.snoozes >= limit:
        error = snooze_limit_error(run.snoozes, limit)
        return Outcome(
            run.id, run.attempt, OutcomeKind.FAILED, error=error, overloaded=snooze.overloaded,
            has_parent=run.has_parent,
        )  # fmt: skip
    delay = snooze.seconds_from(now)
    return Outcome(
        run.id, run.attempt, OutcomeKind.SNOOZED, retry_delay=delay, overloaded=snooze.overloaded,
        has_parent=run.has_parent,
    )  # fmt: skip


def for_cancel_before_trigger(attempt: Attempt, error: BaseException) -> Outcome:
    """A trigger found the run asked to cancel: the attempt ends canceled (the store settles it so)."""
    attempt.stop_reason = attempt.stop_reason or "canceled"
    return for_error(attempt, error)


def canceled(attempt: Attempt) -> Outcome:
    run = attempt.run
    return Outcome(run.id, run.attempt, OutcomeKind.CANCELED, error="canceled", has_parent=run.has_parent)


def failure(attempt: Attempt, error: str, overloaded: bool = False) -> Outcome:
    """A failure, retried while attempts remain; `overloaded`: its error is one of its queue's
    `Adaptive.overloaded_by` types (an adaptive queue lowers its limit on it)."""
    run = attempt.run
    delay = retry_delay(run.attempt, run.max_attempts, run.retry_backoff, random.random())
    return Outcome(
        run.id, run.attempt, OutcomeKind.FAILED, error=error, retry_delay=delay, overloaded=overloaded,
        has_parent=run.has_parent,
    )  # fmt: skip
