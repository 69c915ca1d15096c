"""Named rates' pure rules (domain/named_rates.py): declarations, step costs, and the all-or-none
charge of a step's rates, against a log of every start (hypothesis).

`decide_rates` charges every window of every rate a step pays, or none: the log of the starts
it admitted never holds more than a window's limit in any window of its length, a refusal
changes no state, and it admits exactly when each rate alone would (`domain.rates.take`).
"""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidegate.domain.errors import ConfigurationError, InvalidArgument, RateCostTooLarge, RateNotFound
from tidegate.domain.named_rates import (
    RateRow,
    change_event,
    check_step_rates,
    decide_rates,
    declare,
    named_rate_of,
    named_rate_scope,
    override,
    rate_windows,
    refundable,
    reset,
)
from tidegate.domain.rates import NS, Rate, refund, take, to_ns, window_key

WINDOWS = {
    "api": (Rate(3, 1, burst=1), Rate(5, 10, burst=2)),
    "db": (Rate(4, 2.5, burst=2),),
}


def most_in_a_window(starts: list[tuple[Fraction, int]], per: Fraction) -> int:
    return max((sum(c for t, c in starts if begin <= t < begin + per) for begin, _ in starts), default=0)


steps = st.lists(
    st.tuples(
        st.integers(0, 300).map(lambda ms: Fraction(ms, 100)),  # the gap before this step asks
        st.dictionaries(st.sampled_from(sorted(WINDOWS)), st.integers(1, 2), min_size=1),
    ),
    min_size=1,
    max_size=50,
)


@settings(max_examples=300, deadline=None)
@given(steps)
def test_a_steps_rates_are_charged_all_or_none_and_never_past_a_window(asked) -> None:
    states: dict[tuple[str, int], int] = {}
    logs: dict[str, list[tuple[Fraction, int]]] = {name: [] for name in WINDOWS}
    now = Fraction(0)
    for gap, costs in asked:
        now += gap
        before = dict(states)
        alone = {
            name: take(
                [states.get((named_rate_scope(name), window_key(r))) for r in WINDOWS[name]],
                WINDOWS[name],
                cost,
                float(now),
            ).allowed
            for name, cost in costs.items()
            if cost <= min(r.allowed_burst for r in WINDOWS[name])
        }
        if any(cost > min(r.allowed_burst for r in WINDOWS[name]) for name, cost in costs.items()):
            with pytest.raises(RateCostTooLarge):
                decide_rates(costs, WINDOWS, states, float(now))
            continue
        verdict = decide_rates(costs, WINDOWS, states, float(now))
        assert verdict.allowed == all(alone.values())  # every window of every rate, no more, no less
        if not verdict.allowed:
            assert verdict.retry_at is not None and verdict.retry_at > float(now) and states == before
            assert verdict.held_by in costs and not verdict.charges
            continue
        states.update(verdict.states)
        at = Fraction(to_ns(float(now)), NS)
        for name, cost in costs.items():
            logs[name].append((at, cost))
        assert {charge.scope for charge in verdict.charges} == {named_rate_scope(name) for name in costs}
    for name, windows in WINDOWS.items():
        for rate in windows:
            assert most_in_a_window(logs[name], Fraction(rate.seconds)) <= rate.limit


def test_a_refused_step_says_the_latest_rate_and_its_time() -> None:
    first = decide_rates({"api": 1, "db": 1}, WINDOWS, {}, 100.0)
    assert first.allowed
    second = decide_rates({"api": 1, "db": 1}, WINDOWS, dict(first.states), 100.0)
    assert not second.allowed and second.held_by == "api" and second.held_label == "3/1s, 5/10s"
    assert second.retry_at is not None and 100.0 < second.retry_at <= 100.0 + 1.0


def test_an_undeclared_rate_and_a_cost_past_the_burst_never_fit() -> None:
    with pytest.raises(RateNotFound, match="'nope' is not declared"):
        decide_rates({"nope": 1}, WINDOWS, {}, 0.0)
    with pytest.raises(RateCostTooLarge, match="burst is 1"):
        decide_rates({"api": 2}, WINDOWS, {}, 0.0)


def test_a_charge_is_given_back_only_for_a_step_that_never_started() -> None:
    verdict = decide_rates({"db": 1}, WINDOWS, {}, 50.0)
    charges = list(verdict.charges)
    assert refundable(charges, None)
    assert refundable(charges, 49.0)  # recorded running in an earlier try, before this charge
    assert not refundable(charges, 50.0) and not refundable(charges, 50.2)
    assert not refundable([], None)
    [charge] = charges
    assert refund(verdict.states[(charge.scope, charge.window)], charge, 50.0) == to_ns(50.0)  # as if never charged


@pytest.mark.parametrize(
    ("limit", "per", "burst", "message"),
    [
        (0, "1s", None, "Rate.limit must be a whole number from 1"),
        (-1, "1s", None, "Rate.limit"),
        (True, "1s", None, "Rate.limit"),
        (10, "later", None, "Rate.per: cannot read 'later'"),
        (10, "0s", None, "Rate.per: '0s' is out of range"),
        (10, None, None, "needs per="),
        (10, "1s", 11, "Rate.burst"),
        ([], None, None, "at least one window"),
        ([Rate(1, "1s"), Rate(2, "1s")], None, None, "two rates with the window 1s"),
        ([Rate(1, "1s")], "1s", None, "inside each Rate"),
        (["1/s"], None, None, "expected Rate"),
    ],
)
def test_bad_windows_are_refused(limit, per, burst, message) -> None:
    with pytest.raises(ConfigurationError, match=message):
        rate_windows(limit, per, burst)


def test_windows_are_kept_in_window_order() -> None:
    assert rate_windows([Rate(100, "1h"), Rate(5, "1s")]) == (Rate(5, "1s"), Rate(100, "1h"))
    assert rate_windows(Rate(5, "1s")) == (Rate(5, "1s"),)
    assert rate_windows(5, "1s", 2) == (Rate(5, "1s", 2),)


def test_step_costs_are_checked() -> None:
    assert check_step_rates({"b": 2, "a": 1}) == {"a": 1, "b": 2}
    assert check_step_rates(None) == {}
    for bad, message in (({"a": 0}, "cost"), ({"a": 1.5}, "cost"), ({"a b": 1}, "rate name"), ([1], "a dict")):
        with pytest.raises(InvalidArgument, match=message):
            check_step_rates(bad)


def test_the_code_declares_a_live_change_overrides_until_reset_and_both_are_audited() -> None:
    code, live = (Rate(10, "1s"),), (Rate(2, "1s"),)
    declared = declare(RateRow(), code)
    assert (declared.in_force, declared.source) == (code, "code")
    overridden = declare(override(declared, live), code)  # a later import keeps the override
    assert (overridden.in_force, overridden.source, overridden.version) == (live, "override", 1)
    back = reset(overridden)
    assert (back.in_force, back.source, back.version) == (code, "code", 2)
    assert change_event("api", declared, declare(declared, code), live=False) is None  # the same again: no news
    event = change_event("api", overridden, back, live=True)
    assert event is not None and event.metadata == {
        "target": "rate:@api", "old": "2/1s", "new": "10/1s", "source": "code", "reset": True,
    }  # fmt: skip
    assert reset(override(RateRow(), live)).in_force is None


def test_a_named_rates_scope_meets_no_queue_or_tag_rate() -> None:
    assert named_rate_scope("api") == "rate:@api" and named_rate_of("rate:@api") == "api"
    assert named_rate_of("rate:api") is None and named_rate_of("rate:tag:k=v") is None
