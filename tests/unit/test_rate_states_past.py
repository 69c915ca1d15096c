"""A rate state that is not after now is as good as none: what lets a claim read only live states.

SQLite's claim reads the rate states with its usage, only those whose TAT is after
now (less a slack: storage/sqlite/claims.py `_usage`), and charges a window left
unread as one never charged. That is exact only because GCRA cannot tell the two
apart: the same answer and the same new state from `take`, and, for the charge
recorded with `before=None` instead of the past state, the same refund and the same
correction at any later time. Each property fails if one of these functions starts
reading a past state (a mutation of the rule the claim relies on).
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tidegate.domain.rates import NS, Charge, Rate, correct, interval, refund, take, to_ns, window_key

rates = st.builds(
    lambda limit, per, burst: Rate(limit, per, burst=min(burst, limit)),
    st.integers(1, 50),
    st.sampled_from([0.01, 0.5, 1.0, 60.0]),
    st.integers(1, 50),
)
nows = st.floats(1.0, 1e6, allow_nan=False, allow_infinity=False)


@given(rates, nows, st.integers(0, 10 * NS), st.integers(1, 50))
def test_take_answers_the_same_for_a_past_state_and_for_none(rate: Rate, now: float, age: int, cost: int) -> None:
    past = to_ns(now) - age
    with_past, with_none = take([past], (rate,), cost, now), take([None], (rate,), cost, now)
    assert with_past.allowed == with_none.allowed and with_past.retry_at == with_none.retry_at
    if with_none.allowed:
        assert with_past.states == with_none.states


@given(rates, nows, st.integers(0, 10 * NS), st.integers(1, 5), st.floats(0, 100), st.integers(0, 5), st.data())
def test_a_charge_recorded_without_its_past_state_is_given_back_and_corrected_the_same(
    rate: Rate, now: float, age: int, cost: int, later: float, corrected_to: int, data: st.DataObject
) -> None:
    cost = min(cost, rate.allowed_burst)
    at = to_ns(now)
    past = at - age
    taken = take([None], (rate,), cost, now)
    assert taken.allowed and taken.states[0] is not None
    after = taken.states[0]
    since = data.draw(st.integers(0, 3 * NS), label="charged since")  # what later charges added
    state = after + since
    charge = Charge("rate:q", window_key(rate), None, after, cost, interval(rate), at)
    kept = Charge("rate:q", window_key(rate), past, after, cost, interval(rate), at)
    when = now + later
    assert refund(state, charge, when) == refund(state, kept, when)
    new_none, charged_none = correct(state, charge, corrected_to, when)
    new_past, charged_past = correct(state, kept, corrected_to, when)
    assert new_none == new_past and charged_none.after == charged_past.after
