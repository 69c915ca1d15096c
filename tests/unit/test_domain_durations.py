"""`parse_duration` / `format_duration`: the one parser behind every duration in the API, CLI and env."""

import math

import pytest
from hypothesis import assume, example, given
from hypothesis import strategies as st

from tidegate import ConfigurationError
from tidegate.domain.durations import MAX_DURATION, format_duration, parse_duration

UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}

# Characters that can never make a duration valid: not digits, not units, and
# nothing float() would accept either ('.', 'e', '_', '+', 'inf', 'nan' are left out).
GARBAGE = st.sampled_from([*"xyzqwkv!,-/#%*", " ", "\t", "5-", "-", "1 s", "--"])

whole_seconds = st.integers(min_value=0, max_value=10**7)
parts = st.lists(
    st.tuples(st.integers(min_value=0, max_value=10_000), st.sampled_from(list(UNITS))), min_size=1, max_size=5
)


@given(whole_seconds)
@example(0)
@example(59)
@example(60)
@example(5400)
@example(86400 + 1)
def test_format_then_parse_round_trips_whole_seconds(seconds):
    text = format_duration(seconds)
    assert parse_duration(text) == seconds


@given(parts)
def test_a_sum_of_unit_parts_is_the_sum_of_its_values(chunks):
    text = "".join(f"{value}{unit}" for value, unit in chunks)
    expected = sum(value * UNITS[unit] for value, unit in chunks)
    assume(expected <= MAX_DURATION)  # past it is refused (the test below)
    assert math.isclose(parse_duration(text), expected, rel_tol=1e-12, abs_tol=1e-9)
    assert math.isclose(parse_duration(text.upper()), expected, rel_tol=1e-12, abs_tol=1e-9)
    assert math.isclose(parse_duration(f"  {text} "), expected, rel_tol=1e-12, abs_tol=1e-9)


def test_a_duration_past_a_hundred_years_is_refused():
    with pytest.raises(ConfigurationError, match="out of range"):
        parse_duration("36501d")


@given(st.floats(min_value=0, max_value=1e9, allow_nan=False) | st.integers(min_value=0, max_value=10**9))
def test_plain_non_negative_numbers_are_seconds(value):
    assert parse_duration(value) == float(value)
    assert parse_duration(repr(float(value))) == float(value)


@given(st.floats(max_value=-1e-9, allow_nan=False) | st.integers(max_value=-1))
def test_negative_numbers_are_refused(value):
    with pytest.raises(ConfigurationError, match="not negative"):
        parse_duration(value)
    with pytest.raises(ConfigurationError):
        parse_duration(str(value))


@given(parts, st.data())
def test_garbage_anywhere_in_a_valid_duration_is_refused(chunks, data):
    text = "".join(f"{value}{unit}" for value, unit in chunks)
    junk = data.draw(GARBAGE)
    position = data.draw(st.integers(min_value=0, max_value=len(text)))
    if junk.strip() == "":
        position = data.draw(st.integers(min_value=1, max_value=max(1, len(text) - 1)))  # inside, not at the ends
    broken = text[:position] + junk + text[position:]
    with pytest.raises(ConfigurationError, match="setting_x"):
        parse_duration(broken, name="setting_x")


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "   ",
        "s",
        "ms",
        "1h30",
        "h1",
        "1 h",
        "1.5.s",
        "-5s",
        "-1",
        "5sec",
        "1y",
        "nan",
        "inf",
        "-inf",
        "1e999",
        "10s-",
    ],
)
def test_malformed_durations_are_refused_with_the_setting_name(bad):
    with pytest.raises(ConfigurationError, match="TIDEGATE_LEASE_DURATION"):
        parse_duration(bad, name="TIDEGATE_LEASE_DURATION")


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), True, None, [1], b"5s"])
def test_non_duration_values_are_refused(bad):
    with pytest.raises(ConfigurationError):
        parse_duration(bad)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("250ms", 0.25), ("30s", 30), ("5m", 300), ("1h30m", 5400), ("2d", 172800), ("1.5s", 1.5), ("10", 10)],
)
def test_documented_examples(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


def test_format_examples():
    assert format_duration(5400) == "1h30m"
    assert format_duration(0.25) == "250ms"
    assert format_duration(0) == "0ms"
