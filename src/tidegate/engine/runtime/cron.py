"""Cron expressions in a time zone: croniter reads the expression, zoneinfo the zone's rules.

Ticks are computed in the schedule's zone and handed on as UTC instants, so
daylight saving time is the zone's business, not the worker's: `0 9 * * *`
in Europe/Paris fires at 09:00 Paris time in winter and in summer. On the
night clocks go forward, a time that does not exist fires once, at the first
minute after the gap (croniter's rule). On the night they go back, a time
that happens twice fires once, at its first occurrence, unless the
expression names every hour (`*/30 * * * *`, `0 * * * *`): those keep
firing on real time through the repeated hour, as cron does for them.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterError, croniter

from tidegate.domain.errors import InvalidArgument

HOURS_IN_A_DAY = 24
JUST_AFTER = timedelta(microseconds=1)  # croniter steps back strictly before its start


class Cron:
    """One schedule's expression and zone, checked once; instants in and out are aware UTC datetimes."""

    def __init__(self, expression: str, timezone: str) -> None:
        self.expression = expression
        self.zone = zone_of(timezone)
        if not isinstance(expression, str) or not expression.strip() or "\n" in expression:
            raise InvalidArgument(f"cron expression {expression!r} is not valid: give e.g. '*/5 * * * *'")
        try:
            parsed = croniter(expression, datetime(2000, 1, 1, tzinfo=self.zone))
            parsed.get_next(datetime)  # an expression that matches no date ("0 0 30 2 *") fails here
        except (CroniterError, ValueError, KeyError) as error:
            raise InvalidArgument(f"cron expression {expression!r} is not valid: {error}") from None
        hours = parsed.expanded[1]
        self._every_hour = hours == ["*"] or len(hours) == HOURS_IN_A_DAY

    def next_after(self, moment: datetime) -> datetime:
        """The first tick strictly after `moment`."""
        it = croniter(self.expression, moment.astimezone(self.zone))
        while True:
            tick = self._utc(self._step(it.get_next))
            if tick > moment and not self._repeated(tick):
                return tick

    def due(self, start: datetime, now: datetime, limit: int) -> tuple[list[datetime], bool]:
        """Ticks in [start, now], oldest first: at most the latest `limit`, and whether older ones were left out.

        Walks back from `now`, so a year of downtime costs `limit` steps, not a year of ticks.
        """
        if start > now:
            return [], False
        found: list[datetime] = []
        it = croniter(self.expression, (now + JUST_AFTER).astimezone(self.zone))  # a tick at `now` is due
        while len(found) < limit + 1:
            tick = self._utc(self._step(it.get_prev))
            if tick < start:
                break
            if not self._repeated(tick):
                found.append(tick)
        found.reverse()
        return found[-limit:], len(found) > limit

    def _step(self, step: Callable[[type[datetime]], datetime]) -> datetime:
        """One tick forward or back; croniter gives up on dates it cannot reach (past year 9999)."""
        try:
            return step(datetime)
        except CroniterError as error:
            raise InvalidArgument(f"cron expression {self.expression!r}: {error}") from None

    def _repeated(self, tick: datetime) -> bool:
        """A wall time seen for the second time as clocks go back (skipped unless every hour fires)."""
        return not self._every_hour and datetime.fromtimestamp(tick.timestamp(), self.zone).fold == 1

    @staticmethod
    def _utc(moment: datetime) -> datetime:
        return datetime.fromtimestamp(moment.timestamp(), UTC)


def zone_of(timezone: str) -> ZoneInfo:
    """An IANA zone by name (`Europe/Paris`, `UTC`); anything else is refused, naming it."""
    if not isinstance(timezone, str) or not timezone or "\x00" in timezone:
        raise InvalidArgument(f"time zone {timezone!r} is not valid: give an IANA name like 'Europe/Paris' or 'UTC'")
    try:
        return ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise InvalidArgument(
            f"time zone {timezone!r} is not known: give an IANA name like 'Europe/Paris' or 'UTC'"
        ) from None
