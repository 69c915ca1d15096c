"""`retry_delay`: exponential backoff with caller-supplied jitter, None once attempts are exhausted."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidegate.domain.retry import MAX_BACKOFF_SECONDS, retry_delay

attempts = st.integers(min_value=1, max_value=80)
bases = st.floats(min_value=0.0, max_value=10_000, allow_nan=False, allow_infinity=False)
jitters = st.floats(min_value=0.0, max_value=1.0, exclude_max=True)


@given(attempts, st.integers(min_value=1, max_value=80), bases, jitters)
def test_none_exactly_when_attempts_are_exhausted(attempt, max_attempts, base, jitter):
    delay = retry_delay(attempt, max_attempts, base, jitter)
    assert (delay is None) == (attempt >= max_attempts)


@given(attempts, bases, jitters)
def test_delay_is_jittered_exponential_step_capped_at_an_hour(attempt, base, jitter):
    delay = retry_delay(attempt, attempt + 1, base, jitter)
    assert delay is not None
    step = base * 2 ** (attempt - 1)
    assert 0 <= delay <= MAX_BACKOFF_SECONDS
    assert delay >= min(MAX_BACKOFF_SECONDS, 0.5 * step) * (1 - 1e-12)
    if step * 1.5 <= MAX_BACKOFF_SECONDS:
        # [0.5, 1.5) in exact arithmetic; 0.5 + jitter rounds to 1.5 for the largest jitter < 1
        assert delay <= 1.5 * step
    assert delay == pytest.approx(min(MAX_BACKOFF_SECONDS, step * (0.5 + jitter)), rel=1e-9, abs=1e-12)


@given(st.integers(min_value=1, max_value=40), st.floats(min_value=0.001, max_value=100), jitters)
def test_delay_never_shrinks_as_attempts_grow(attempt, base, jitter):
    first = retry_delay(attempt, 100, base, jitter)
    second = retry_delay(attempt + 1, 100, base, jitter)
    assert first is not None and second is not None
    assert second >= first


def test_examples():
    assert retry_delay(1, 3, 1.0, 0.5) == pytest.approx(1.0)
    assert retry_delay(2, 3, 1.0, 0.5) == pytest.approx(2.0)
    assert retry_delay(3, 3, 1.0, 0.5) is None
    assert retry_delay(1, 1, 1.0, 0.0) is None
    assert retry_delay(30, 31, 1.0, 0.0) == MAX_BACKOFF_SECONDS
