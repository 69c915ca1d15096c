"""The rate limiter (domain/rates.py) against a log of every start, with exact arithmetic.

The log is the reference: the cost in any half-open window [t, t + per) is a
sum over it, and the token bucket GCRA claims to be is a maximum over its
suffixes. Costs and times come from hypothesis; the limiter only ever sees
floats, as it does from the database.
"""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidegate.domain.errors import ConfigurationError
from tidegate.domain.rates import (
    LEAD_CAP_NS,
    NS,
    Charge,
    Rate,
    check_rates,
    correct,
    interval,
    refund,
    take,
    to_ns,
    window_key,
)

Log = list[tuple[Fraction, int]]  # (start, cost), in time order


def most_in_a_window(log: Log, per: Fraction) -> int:
    """The largest cost in any window [t, t + per): some such window starts at a logged start."""
    return max((sum(c for t, c in log if start <= t < start + per) for start, _ in log), default=0)


def conforms(log: Log, rate: Rate, cost: int, now: Fraction) -> bool:
    """The token bucket of `rate` (size burst, refill `sustained` per `per`) has room for `cost` at `now`.

    GCRA's TAT after a log is the largest `start + T * (cost of the suffix from it)`;
    a start fits when that, pushed by `cost`, ends within `burst * T` of now.
    """
    step = Fraction(interval(rate), NS)
    tat = max([now] + [start + step * sum(c for _, c in log[i:]) for i, (start, _) in enumerate(log)])
    return cost <= rate.allowed_burst and tat + cost * step <= now + rate.allowed_burst * step


rates = st.integers(1, 12).flatmap(
    lambda limit: st.builds(
        Rate,
        limit=st.just(limit),
        per=st.sampled_from([1, 2.5, 10, 0.3]),
        burst=st.one_of(st.none(), st.integers(1, limit)),
    )
)
requests = st.lists(
    st.tuples(st.integers(0, 400).map(lambda ms: Fraction(ms, 100)), st.integers(1, 4)), min_size=1, max_size=60
)


def run(rate_list: list[Rate], arrivals: list[tuple[Fraction, int]]) -> tuple[list[Log], list[bool]]:
    """Offer each (gap, cost) in turn; return each window's log (the same log) and the answers."""
    states: tuple[int | None, ...] = (None,) * len(rate_list)
    log: Log = []
    now, answers = Fraction(0), []
    for gap, cost in arrivals:
        now += gap
        at = float(now)
        exact = Fraction(to_ns(at), NS)  # the instant the limiter counts
        expected = all(conforms(log, rate, cost, exact) for rate in rate_list)
        taken = take(states, rate_list, cost, at)
        answers.append(taken.allowed)
        assert taken.allowed == expected, (log, cost, exact)
        if taken.allowed:
            states = taken.states
            log.append((exact, cost))
        else:
            assert taken.states == states
            assert taken.retry_at > at
            if taken.retry_at != float("inf"):  # at the time it names, it is allowed
                assert take(states, rate_list, cost, taken.retry_at).allowed
                just_before = float(Fraction(taken.retry_at) - Fraction(1, 10**6))
                assert just_before <= at or not take(states, rate_list, cost, just_before).allowed
    return [log] * len(rate_list), answers


@settings(max_examples=300, deadline=None)
@given(st.lists(rates, min_size=1, max_size=3, unique_by=lambda r: r.seconds), requests)
def test_never_more_than_the_limit_in_any_window_and_admits_when_the_bucket_has_room(rate_list, arrivals):
    logs, _ = run(rate_list, arrivals)
    for rate, log in zip(rate_list, logs, strict=True):
        assert most_in_a_window(log, Fraction(rate.seconds)) <= rate.limit


@settings(max_examples=200, deadline=None)
@given(rates, requests, st.data())
def test_a_refund_of_the_last_charge_is_exact(rate, arrivals, data):
    state: int | None = None
    log: Log = []
    now = Fraction(0)
    for gap, cost in arrivals:
        now += gap
        before = state
        taken = take((state,), (rate,), cost, float(now))
        if not taken.allowed:
            continue
        state = taken.states[0]
        assert state is not None
        log.append((Fraction(to_ns(float(now)), NS), cost))
        if data.draw(st.booleans()):  # the claim is undone before the run starts
            later = now + data.draw(st.sampled_from([Fraction(0), Fraction(1, 100), Fraction(1, 3)]))
            back = refund(state, Charge("rate:q", window_key(rate), before, state, cost), float(later))
            log.pop()
            # exact: from then on the state behaves as if the charge never happened
            for after in (later, later + Fraction(1, 7), later + 3):
                for size in range(1, rate.allowed_burst + 1):
                    again = take((back,), (rate,), size, float(after)).allowed
                    assert again == take((before,), (rate,), size, float(after)).allowed
            state = back
            now = later
        assert most_in_a_window(log, Fraction(rate.seconds)) <= rate.limit


# One of: a start offered after a gap with a cost; a refund of a kept start; a correction of a kept
# start's cost (pick: which of the kept starts, modulo their number).
operations = st.lists(
    st.one_of(
        st.tuples(st.just("start"), st.integers(0, 300).map(lambda ms: Fraction(ms, 100)), st.integers(1, 4)),
        st.tuples(st.just("refund"), st.integers(0, 30).map(lambda ms: Fraction(ms, 100)), st.integers(0, 50)),
        st.tuples(st.just("correct"), st.integers(0, 30).map(lambda ms: Fraction(ms, 100)), st.integers(0, 50)),
    ),
    min_size=1,
    max_size=60,
)


@settings(max_examples=200, deadline=None)
@given(st.lists(rates, min_size=1, max_size=2, unique_by=lambda r: r.seconds), operations, st.data())
def test_refunds_and_corrections_in_any_order_never_admit_what_the_kept_starts_forbid(rate_list, ops, data):
    """The stored states after any refunds and corrections (of any start, in any order, with
    other charges after them) never admit a start that the token bucket over the starts kept,
    at their corrected costs, would refuse: so no window holds more than the limit unless a
    correction itself raised a cost past it (a start that already happened)."""
    states: list[int | None] = [None] * len(rate_list)
    kept: dict[int, tuple[Fraction, int, list[Charge]]] = {}  # start number -> (at, cost, charges)
    now = Fraction(0)
    raised = False
    for number, (kind, gap, value) in enumerate(ops):
        now += gap
        exact = Fraction(to_ns(float(now)), NS)
        log = sorted((at, cost) for at, cost, _ in kept.values())
        if kind == "start":
            taken = take(states, rate_list, value, float(now))
            if taken.allowed:
                assert all(conforms(log, rate, value, exact) for rate in rate_list), (log, value, exact)
                charges = [
                    Charge("rate:q", window_key(rate), before, after, value, interval(rate))
                    for rate, before, after in zip(rate_list, states, taken.states, strict=True)
                ]
                states = list(taken.states)
                kept[number] = (exact, value, charges)
            continue
        if not kept:
            continue
        chosen = sorted(kept)[value % len(kept)]
        at, cost, charges = kept[chosen]
        if kind == "refund":
            states = [refund(state, charge, float(now)) for state, charge in zip(states, charges, strict=True)]
            del kept[chosen]
        else:
            new_cost = data.draw(st.integers(0, 5))
            raised |= new_cost > cost
            corrected = [
                correct(state, charge, new_cost, float(now)) for state, charge in zip(states, charges, strict=True)
            ]
            states = [state for state, _ in corrected]
            kept[chosen] = (at, new_cost, [charge for _, charge in corrected])
    if not raised:
        log = sorted((at, cost) for at, cost, _ in kept.values() if cost)
        for rate in rate_list:
            assert most_in_a_window(log, Fraction(rate.seconds)) <= rate.limit


def test_a_refund_after_a_later_charge_gives_back_only_what_is_unspent():
    rate = Rate(limit=2, per=1, burst=1)
    step = interval(rate)  # 0.5 s
    first = take((None,), (rate,), 1, 0.0).states
    second = take(first, (rate,), 1, 0.5).states
    assert first[0] is not None and second[0] is not None
    charge = Charge("rate:q", window_key(rate), None, first[0], 1)
    # at 0.5 s the first charge's time (0 to 0.5 s) is all behind: nothing comes back
    assert refund(second[0], charge, 0.5) == second[0]
    # at 0.2 s (a hand-back before the second start's claim could see it) 0.3 s come back
    assert refund(second[0], charge, 0.2) == second[0] - (step - to_ns(0.2))
    # where runs may be taken ahead, the furthest lead past now that one may stand on stays spent
    assert refund(second[0], charge, 0.2, LEAD_CAP_NS) == second[0] - (step - to_ns(0.2) - LEAD_CAP_NS)


def test_a_correction_takes_more_at_once_and_gives_back_at_most_what_is_unspent():
    rate = Rate(limit=10, per=1, burst=5)
    step = interval(rate)
    [state] = take((None,), (rate,), 2, 0.0).states
    assert state is not None
    charge = Charge("rate:q", window_key(rate), None, state, 2, step)
    more, charged = correct(state, charge, 5, 0.0)
    assert more == state + 3 * step and (charged.cost, charged.after) == (5, state + 3 * step)
    less, back = correct(more, charged, 0, 0.0)
    assert less == 0 and back.cost == 0  # everything given back: as if never charged
    with pytest.raises(ValueError, match="at least 0"):
        correct(state, charge, -1, 0.0)


def test_burst_equal_to_limit_with_interval_per_over_limit_is_a_bucket_not_a_window():
    """The usual GCRA reading lets 3 through a 2-per-second window: why T is per/(limit+1-burst)."""
    limit, per = 2, Fraction(1)
    step, burst = per / limit, limit  # tolerance per - per/limit: exact here, no rounding
    tat, starts = Fraction(0), []
    for now in (Fraction(0), Fraction(0), Fraction(0), Fraction(1, 2)):
        if max(tat, now) + step <= now + burst * step:
            tat = max(tat, now) + step
            starts.append((now, 1))
    assert most_in_a_window(starts, per) == 3
    # the limiter with the same burst spaces the rest a whole window apart
    rate, states, allowed = Rate(limit=2, per=1, burst=2), (None,), 0
    for now in (0.0, 0.0, 0.0, 0.5, 0.99):
        taken = take(states, (rate,), 1, now)
        allowed += taken.allowed
        states = taken.states if taken.allowed else states
    assert allowed == 2


@pytest.mark.parametrize("limit, burst", [(20, None), (200, None), (10, 1), (60, 3)])
def test_a_steady_backlog_gets_the_sustained_rate(limit, burst):
    """Offered every millisecond for 10 windows: `sustained` per window, give or take the first burst.

    With a burst of 1 a start offered late loses the lateness (here under a
    nanosecond of rounding per start); a larger burst absorbs it.
    """
    rate = Rate(limit=limit, per=1, burst=burst)
    states: tuple[int | None, ...] = (None,)
    starts: Log = []
    for ms in range(10_000):
        taken = take(states, (rate,), 1, ms / 1000)
        if taken.allowed:
            states = taken.states
            starts.append((Fraction(to_ns(ms / 1000), NS), 1))
    least = 10 * rate.sustained if rate.allowed_burst > 1 else 0.95 * 10 * rate.sustained
    assert least <= len(starts) <= 10 * rate.sustained + rate.allowed_burst
    assert rate.sustained >= 0.95 * limit or rate.allowed_burst == 1
    assert most_in_a_window(starts, Fraction(1)) <= limit


def test_a_blocked_charge_names_the_latest_window_and_a_cost_above_the_burst_never_fits():
    second, minute = Rate(limit=2, per=1, burst=1), Rate(limit=3, per=60, burst=1)  # T = 0.5s and 20s
    states = take((None, None), (second, minute), 1, 0.0).states
    blocked = take(states, (second, minute), 1, 1.5)  # the second allows it, the minute not before 20s
    assert not blocked.allowed and blocked.retry_at == 20.0 and blocked.states == states
    assert take(states[:1], (second,), 1, 1.5).allowed
    assert take((None,), (second,), 2, 0.0).retry_at == float("inf")


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"limit": 0, "per": "1s"}, "Rate.limit"),
        ({"limit": -3, "per": "1s"}, "Rate.limit"),
        ({"limit": True, "per": "1s"}, "Rate.limit"),
        ({"limit": 2**31, "per": "1s"}, "Rate.limit"),
        ({"limit": 5, "per": "soon"}, "Rate.per"),
        ({"limit": 5, "per": "0s"}, "Rate.per"),
        ({"limit": 5, "per": -1}, "Rate.per"),
        ({"limit": 5, "per": "1s", "burst": 6}, "Rate.burst"),
        ({"limit": 5, "per": "1s", "burst": 0}, "Rate.burst"),
    ],
)
def test_bad_rates_are_refused_naming_the_field(kwargs, message):
    with pytest.raises(ConfigurationError, match=message):
        Rate(**kwargs)


def test_check_rates_takes_one_or_a_list_and_refuses_a_window_twice():
    one = Rate(limit=5, per="1s")
    assert check_rates(one) == (one,)
    assert check_rates(None) == ()
    with pytest.raises(ConfigurationError, match="window 1s"):
        check_rates([one, Rate(limit=9, per=1)])
    with pytest.raises(ConfigurationError, match="expected Rate"):
        check_rates(["5/s"])
    assert Rate.from_json(one.to_json()) == Rate(limit=5, per=1.0, burst=1)


@settings(max_examples=500)
@given(st.floats(min_value=-1e10, max_value=1e10, allow_nan=False) | st.integers(-(10**10), 10**10))
def test_a_time_in_ns_is_the_exact_ceiling_of_the_time_in_seconds(now):
    """`to_ns` rounds up exactly (its integer arithmetic is the exact ceiling of the float's value):
    an instant rounded down would let a charge count earlier than it happened."""
    assert to_ns(now) == math.ceil(Fraction(now) * NS)
    assert to_ns(1780000000.0000000002) == math.ceil(Fraction(1780000000.0000000002) * NS)
