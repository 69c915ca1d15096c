"""The pure parts of schedules: which due ticks fire, and cron ticks in a time zone across DST."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import pairwise

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidegate.domain.errors import InvalidArgument
from tidegate.domain.schedules import CATCH_UP_LIMIT, check_missed, ticks_to_fire
from tidegate.engine.runtime.cron import Cron

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)


def run_of(cron: Cron, start: datetime, end: datetime) -> list[datetime]:
    ticks, moment = [], start
    while (moment := cron.next_after(moment)) <= end:
        ticks.append(moment)
    return ticks


@given(st.integers(min_value=0, max_value=300))
def test_skip_fires_only_the_latest_due_tick_and_catch_up_the_latest_hundred(count):
    due = [T0 + timedelta(minutes=n) for n in range(count)]
    assert ticks_to_fire(due, "skip") == due[-1:]
    assert ticks_to_fire(due, "catch_up") == due[-CATCH_UP_LIMIT:]


def test_a_missed_policy_is_one_of_two():
    assert check_missed("catch_up") == "catch_up"
    with pytest.raises(InvalidArgument, match="'skip' or 'catch_up'"):
        check_missed("all")


def test_a_daily_time_follows_the_zone_across_daylight_saving():
    nine = Cron("0 9 * * *", "Europe/Paris")
    ticks = run_of(nine, utc(2026, 3, 27), utc(2026, 3, 31))
    assert ticks == [utc(2026, 3, 27, 8), utc(2026, 3, 28, 8), utc(2026, 3, 29, 7), utc(2026, 3, 30, 7)]


def test_a_time_that_does_not_exist_fires_once_after_the_gap():
    half_past_two = Cron("30 2 * * *", "Europe/Paris")  # 2026-03-29: 02:00 -> 03:00
    ticks = run_of(half_past_two, utc(2026, 3, 28, 12), utc(2026, 3, 30, 12))
    assert ticks == [utc(2026, 3, 29, 1), utc(2026, 3, 30, 0, 30)]  # 03:00 CEST, then 02:30 CEST


def test_a_time_that_happens_twice_fires_once_but_every_hour_keeps_real_time():
    half_past_two = Cron("30 2 * * *", "Europe/Paris")  # 2026-10-25: 03:00 -> 02:00
    assert run_of(half_past_two, utc(2026, 10, 24, 12), utc(2026, 10, 26, 12)) == [
        utc(2026, 10, 25, 0, 30),
        utc(2026, 10, 26, 1, 30),
    ]
    hourly = Cron("0 * * * *", "Europe/Paris")
    day = run_of(hourly, utc(2026, 10, 24, 22) - timedelta(seconds=1), utc(2026, 10, 25, 22, 59))
    assert len(day) == 25  # the day has 25 hours, each fires
    assert [b - a for a, b in pairwise(day)] == [timedelta(hours=1)] * 24


def test_due_walks_back_from_now_and_says_when_older_ticks_were_left_out():
    minute = Cron("* * * * *", "UTC")
    assert minute.due(T0, T0 + timedelta(minutes=2, seconds=30), 10) == (
        [T0, T0 + timedelta(minutes=1), T0 + timedelta(minutes=2)],
        False,
    )
    ticks, left_out = minute.due(T0, T0 + timedelta(days=365), 5)
    assert left_out and ticks == [T0 + timedelta(days=365, minutes=n - 4) for n in range(5)]
    assert minute.due(T0 + timedelta(minutes=1), T0, 5) == ([], False)


@pytest.mark.parametrize(
    "expression, timezone, match",
    [
        ("* * *", "UTC", "cron expression"),
        ("0 25 * * *", "UTC", "cron expression '0 25"),
        ("0 0 30 2 *", "UTC", "cron expression '0 0 30 2 \\*' is not valid: failed to find next date"),
        ("", "UTC", "cron expression ''"),
        ("* * * * *", "Europe/Nowhere", "time zone 'Europe/Nowhere'"),
        ("* * * * *", "", "time zone ''"),
        ("* * * * *", "../../etc/passwd", "time zone"),
    ],
)
def test_bad_expressions_and_zones_are_named(expression, timezone, match):
    with pytest.raises(InvalidArgument, match=match):
        Cron(expression, timezone)
