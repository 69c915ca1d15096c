"""How an attempt's ending becomes the outcome the store records.

A value completes the run unless it cannot be stored; an error fails it
(with a retry delay while attempts remain) unless the worker had asked the
attempt to stop, in which case the reason it asked decides: a cancel cancels,
a timeout fails with the timeout's text.
"""

from __future__ import annotations

import random
from typing import Any

from tidegate.domain.errors import InvalidArgument
from tidegate.domain.jsonvalue import ensure_payload
from tidegate.domain.model import Outcome, OutcomeKind
from tidegate.domain.retry import retry_delay
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
    return failure(attempt, describe_error(error))


def for_cancel_before_trigger(attempt: Attempt, error: BaseException) -> Outcome:
    """A trigger found the run asked to cancel: the attempt ends canceled (the store settles it so)."""
    attempt.stop_reason = attempt.stop_reason or "canceled"
    return for_error(attempt, error)


def canceled(attempt: Attempt) -> Outcome:
    run = attempt.run
    return Outcome(run.id, run.attempt, OutcomeKind.CANCELED, error="canceled", has_parent=run.has_parent)


def failure(attempt: Attempt, error: str) -> Outcome:
    run = attempt.run
    delay = retry_delay(run.attempt, run.max_attempts, run.retry_backoff, random.random())
    return Outcome(run.id, run.attempt, OutcomeKind.FAILED, error=error, retry_delay=delay, has_parent=run.has_parent)
