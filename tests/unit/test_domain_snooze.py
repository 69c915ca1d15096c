"""`Snooze`'s delay (domain/snooze.py): every form a caller has in hand, and bad ones refused by name."""

from __future__ import annotations

from datetime import timedelta
from email.utils import formatdate

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidegate.domain.attempts import AttemptCount, compact, describe
from tidegate.domain.durations import MAX_DURATION
from tidegate.domain.errors import ConfigurationError, InvalidArgument
from tidegate.domain.snooze import Snooze, check_max_snoozes, snooze_limit_error

NOW = 1_800_000_000.0


@pytest.mark.parametrize(
    ("delay", "seconds"),
    [(30, 30.0), (0.25, 0.25), ("30s", 30.0), ("1h30m", 5400.0), (" 120 ", 120.0), (timedelta(minutes=2), 120.0)],
)
def test_a_relative_delay_is_seconds_whatever_the_clock(delay: object, seconds: float) -> None:
    snooze = Snooze(delay)  # type: ignore[arg-type]
    assert snooze.until is None
    assert snooze.seconds_from(NOW) == snooze.seconds_from(0.0) == seconds


@given(ahead=st.integers(-(10**6), 10**6))
def test_an_http_date_is_the_seconds_until_it_or_zero_once_past(ahead: int) -> None:
    """Retry-After's HTTP date: whole seconds (the format has no fraction), never negative."""
    snooze = Snooze(formatdate(NOW + ahead, usegmt=True))
    assert snooze.seconds_from(NOW) == max(0, ahead)


@given(seconds=st.floats(0, MAX_DURATION))
def test_any_delay_in_range_is_kept_as_given(seconds: float) -> None:
    assert Snooze(seconds).seconds_from(NOW) == seconds


@pytest.mark.parametrize(
    ("delay", "named"),
    [
        ("soon", "cannot read 'soon'"),
        ("", "cannot read ''"),
        (-1, "from 0 seconds to 100 years"),
        ("-1", "from 0 seconds to 100 years"),
        (float("nan"), "from 0 seconds to 100 years"),
        ("inf", "from 0 seconds to 100 years"),
        (timedelta(days=-1), "from 0 seconds to 100 years"),
        (MAX_DURATION + 1, "from 0 seconds to 100 years"),
        (True, "got True"),
        (None, "got None"),
        ([30], "got [30]"),
    ],
)
def test_a_bad_delay_is_refused_naming_it(delay: object, named: str) -> None:
    with pytest.raises(InvalidArgument, match="Snooze delay") as caught:
        Snooze(delay)  # type: ignore[arg-type]
    assert named in str(caught.value)


def test_overloaded_must_be_a_bool() -> None:
    with pytest.raises(InvalidArgument, match="overloaded must be True or False"):
        Snooze(1, overloaded="yes")  # type: ignore[arg-type]


def test_max_snoozes_is_a_whole_number_in_range() -> None:
    assert check_max_snoozes(0) == 0 and check_max_snoozes(100) == 100
    for bad in (-1, 1.0, False, 10**6 + 1, "3"):
        with pytest.raises(ConfigurationError, match="max_snoozes"):
            check_max_snoozes(bad)
    assert snooze_limit_error(3, 3).startswith("SnoozeLimit: the run snoozed 3 times, its task's max_snoozes (3)")


def test_snoozes_are_worded_with_the_other_uncharged_attempts() -> None:
    count = AttemptCount(attempt=3, max_attempts=3, snoozes=2)
    assert count.declared == 1 and count.uncharged == 2
    assert describe(count) == "3 of 1 allowed, +2 not charged (2 snoozes)"
    assert describe(AttemptCount(2, 3, child_waits=1, snoozes=1)) == (
        "2 of 1 allowed, +2 not charged (1 child wait, 1 snooze)"
    )
    assert compact(count) == "3/1 +2"
    assert count.uncharged_by_cause()["snooze"] == 2
