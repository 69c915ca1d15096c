"""`raise tidegate.Snooze(delay)`: put the run back for later without spending an attempt.

A task that meets a busy downstream ("429, retry after 30 s") is not failing:
retrying it as a failure spends the attempts meant for real errors and backs off
on the retry policy's schedule, not the downstream's. A snooze ends the attempt
uncharged (the budget grows by one, like a wait on children: domain/attempts.py),
queues the run again after `delay`, and counts the snooze on the run. The count is
capped by the task's `max_snoozes`, so a downstream that never recovers ends the
run failed instead of snoozing it forever.

`delay` is what a caller has in hand: a `timedelta`, seconds, a duration string
("30s"), or an HTTP `Retry-After` value, which is either whole seconds or an HTTP
date. A date is kept as it is and turned into seconds by the worker when the
attempt ends (`seconds_from`, on the worker's clock): the domain reads no clock.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime

from tidegate.domain.durations import MAX_DURATION, parse_duration
from tidegate.domain.errors import ConfigurationError, InvalidArgument
from tidegate.domain.integers import check_whole

DEFAULT_MAX_SNOOZES = 100
MAX_SNOOZES = 10**6  # far below what a run's attempt budget can grow by (domain/integers.py)
SNOOZE_LIMIT = "SnoozeLimit"  # the error's name when the cap ends a run


class Snooze(Exception):
    """Raised by a task: queue this run again after `delay`, without spending an attempt.

    `overloaded=True` also says the downstream is overloaded: a queue declared
    `adaptive=` lowers its concurrency limit on it (domain/adaptive.py).
    A bad `delay` raises `InvalidArgument` here, at the `raise`, so the attempt
    fails with an error that names it.
    """

    def __init__(self, delay: timedelta | float | int | str, overloaded: bool = False) -> None:
        if not isinstance(overloaded, bool):
            raise InvalidArgument(f"Snooze overloaded must be True or False, got {overloaded!r}")
        self.seconds, self.until = parse_delay(delay)
        self.overloaded = overloaded
        shown = f"until {self.until.isoformat()}" if self.until is not None else f"for {self.seconds:g}s"
        super().__init__(f"snoozed {shown}" + (" (downstream overloaded)" if overloaded else ""))

    def seconds_from(self, now: float) -> float:
        """Seconds from `now` (epoch seconds) until the run is due again; an HTTP date in the past is 0."""
        if self.until is None:
            return self.seconds
        return min(MAX_DURATION, max(0.0, self.until.timestamp() - now))


def parse_delay(delay: object) -> tuple[float, datetime | None]:
    """(seconds, None) for a relative delay, (0, the date) for an HTTP date; else `InvalidArgument`."""
    if isinstance(delay, timedelta):
        return _seconds(delay.total_seconds(), delay), None
    if isinstance(delay, (int, float)) and not isinstance(delay, bool):
        return _seconds(float(delay), delay), None
    if isinstance(delay, str):
        text = delay.strip()
        number = _number(text)
        if number is not None:  # Retry-After's delta-seconds, or any number of seconds
            return _seconds(number, delay), None
        try:
            return parse_duration(text, name="Snooze delay"), None
        except ConfigurationError:
            return 0.0, _http_date(text, delay)
    raise InvalidArgument(
        f"Snooze delay must be a timedelta, seconds, a duration like '30s' or a Retry-After value, got {delay!r}"
    )


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _seconds(seconds: float, given: object) -> float:
    if not math.isfinite(seconds) or not 0 <= seconds <= MAX_DURATION:
        raise InvalidArgument(f"Snooze delay must be from 0 seconds to 100 years, got {given!r}")
    return seconds


def _http_date(text: str, given: str) -> datetime:
    """An HTTP date (`Retry-After: Wed, 21 Oct 2015 07:28:00 GMT`) as an aware datetime."""
    try:
        moment = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        moment = None
    if moment is None:
        raise InvalidArgument(
            f"Snooze delay: cannot read {given!r} (use seconds, a duration like '30s', a timedelta, or a"
            " Retry-After value: seconds or an HTTP date like 'Wed, 21 Oct 2026 07:28:00 GMT')"
        )
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def check_max_snoozes(value: object) -> int:
    """A task's `max_snoozes`: 0 (a snooze fails the run) to a million."""
    return check_whole("max_snoozes", value, 0, MAX_SNOOZES, ConfigurationError)


def snooze_limit_error(snoozes: int, max_snoozes: int) -> str:
    """Why a run that snoozed once too often failed."""
    return (
        f"{SNOOZE_LIMIT}: the run snoozed {snoozes} times, its task's max_snoozes ({max_snoozes});"
        " it asked to snooze again and was failed instead"
    )
