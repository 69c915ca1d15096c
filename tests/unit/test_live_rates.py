"""Live rates (domain/live_rates.py): how a window is named, how its burst follows a new limit, which
override a scope follows, and the rule a change keeps: the stored state is carried over, and every
window that begins at or after the change holds at most the new limit, from any state the old
rate left (hypothesis, against a log of the starts, as tests/unit/test_rates_model.py)."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidegate.domain.adaptive import Adaptive, AdaptiveState
from tidegate.domain.errors import ConfigurationError
from tidegate.domain.live_rates import (
    family_targets,
    in_force,
    pick_window,
    rate_target,
    relimited,
    split_rate_target,
    window_text,
)
from tidegate.domain.rates import NS, Rate, take, to_ns


def test_a_window_is_named_by_its_length_exactly() -> None:
    assert [window_text(seconds) for seconds in (1, 60, 0.25, 5400, 1.5)] == ["1s", "1m", "250ms", "1h30m", "1.5s"]
    assert rate_target("rate:api/key=a@b", Rate(5, "1m")) == "rate:api/key=a@b@1m"
    assert split_rate_target("rate:api/key=a@b@1m") == ("rate:api/key=a@b", "1m")  # the last @ names the window
    assert split_rate_target("rate:api") == ("rate:api", None)


def test_a_window_is_picked_by_its_length_or_as_the_only_one() -> None:
    second, minute = Rate(4, "1s"), Rate(100, "1m")
    assert pick_window("t", "rate:api", None, [minute]) is minute
    assert pick_window("t", "rate:api", "60s", [second, minute]) is minute
    with pytest.raises(ConfigurationError, match=r"several windows \(1s, 1m\); name one: rate:api@PER"):
        pick_window("t", "rate:api", None, [second, minute])
    with pytest.raises(ConfigurationError, match=r"no window of 2m \(its windows: 1s, 1m\)"):
        pick_window("t", "rate:api", "2m", [second, minute])


def test_the_burst_follows_the_limit_in_proportion_and_never_exceeds_it() -> None:
    declared = Rate(100, "1s", burst=5)
    assert [relimited(declared, limit).allowed_burst for limit in (200, 40, 10, 1)] == [10, 2, 1, 1]
    assert relimited(Rate(4, "1s", burst=4), 2).allowed_burst == 2


def test_the_most_specific_override_wins() -> None:
    assert family_targets("rate:api/key=a") == ["rate:api/key=a", "rate:api"]
    assert family_targets("rate:tag:tenant=acme") == ["rate:tag:tenant=acme", "rate:tag:tenant"]
    declared = [Rate(10, "1s"), Rate(100, "1m")]
    overrides = {"rate:api@1s": 5, "rate:api/key=a@1s": 2, "queue:api": 1}
    assert [rate.limit for rate in in_force("rate:api/key=a", declared, overrides)] == [2, 100]
    assert [rate.limit for rate in in_force("rate:api/key=b", declared, overrides)] == [5, 100]
    assert in_force("rate:api", declared, {}) == tuple(declared)


def _most(log: list[Fraction], per: Fraction) -> int:
    return max((sum(1 for t in log if start <= t < start + per) for start in log), default=0)


@settings(max_examples=300, deadline=None)
@given(
    old_limit=st.integers(1, 30),
    new_limit=st.integers(1, 30),
    before=st.lists(st.integers(0, 300), max_size=60),
    after=st.lists(st.integers(0, 300), min_size=1, max_size=60),
)
def test_every_window_beginning_at_or_after_a_change_holds_at_most_the_new_limit(
    old_limit: int, new_limit: int, before: list[int], after: list[int]
) -> None:
    """Starts offered under the old rate (gaps in hundredths of a second), the limit changed at an
    instant, then more offered under the new one against the state the old left."""
    old = Rate(old_limit, "1s", burst=max(1, old_limit // 3))
    new = relimited(old, new_limit)
    state: int | None = None
    now = Fraction(0)
    for gap in before:
        now += Fraction(gap, 100)
        taken = take([state], [old], 1, float(now))
        state = taken.states[0] if taken.allowed else state
    changed = Fraction(to_ns(float(now)), NS)
    log = []
    for gap in after:
        now += Fraction(gap, 100)
        taken = take([state], [new], 1, float(now))
        if taken.allowed:
            state = taken.states[0]
            log.append(Fraction(to_ns(float(now)), NS))
    assert all(at >= changed for at in log)
    assert _most(log, Fraction(1)) <= new_limit


@settings(max_examples=200, deadline=None)
@given(
    declared=st.integers(1, 50),
    low=st.integers(1, 50),
    stored=st.one_of(st.none(), st.integers(1, 10_000)),
    override=st.one_of(st.none(), st.integers(1, 10_000)),
)
def test_an_adaptive_window_stays_within_its_range_and_an_override_wins(
    declared: int, low: int, stored: int | None, override: int | None
) -> None:
    """In force: the live override when there is one, else the stored effective limit bounded to
    [min, declared] (the declared limit until a signal stored one), whatever was stored."""
    rate = Rate(declared, "1s", adaptive=Adaptive(min=min(low, declared)))
    states = {} if stored is None else {"rate:api@1s": AdaptiveState(stored)}
    overrides = {} if override is None else {"rate:api@1s": override}
    [window] = in_force("rate:api", [rate], overrides, states)
    if override is not None:
        assert window.limit == override
    elif stored is None:
        assert window.limit == declared
    else:
        assert window.limit == max(min(low, declared), min(stored, declared))
    assert 1 <= window.allowed_burst <= window.limit
    [plain] = in_force("rate:api", [Rate(declared, "1s")], {}, {"rate:api@1s": AdaptiveState(1)})
    assert plain.limit == declared  # a window not declared adaptive never follows a stored state
