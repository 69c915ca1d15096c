"""`domain.blocking.verdict` names a rate-blocked run exactly as the claim's charge would refuse it.

Every surface (queue why, the lists, the counts) reads the verdict; the claim
charges with `domain.rates.take`. Hypothesis drives both over the same states
and times: the verdict blocks by the rate exactly when `take` refuses, and its
wait is the time `take` names.
"""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from tidegate.domain.blocking import RATE_COST, verdict
from tidegate.domain.limits import Partition, QueueConfig
from tidegate.domain.rates import NS, Rate, RateStates, take, window_key
from tidegate.domain.scopes import Rules

SCOPE = "rate:api/key=k1"

rates = st.builds(
    lambda limit, per, burst: Rate(limit=limit, per=per, burst=min(burst, limit)),
    st.integers(1, 50),
    st.sampled_from([0.5, 1, 60, 3600]),
    st.integers(1, 5),
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(rates, min_size=1, max_size=3, unique_by=lambda rate: rate.seconds),
    st.data(),
    st.floats(0, 10_000, allow_nan=False),
)
def test_the_verdict_blocks_by_a_rate_exactly_when_take_refuses(windows, data, now):
    states = [
        data.draw(st.none() | st.integers(math.ceil(now * NS) - 2 * NS, math.ceil(now * NS) + 4000 * NS))
        for _ in windows
    ]
    config = QueueConfig("api", rate=windows, rate_partition=Partition(by_args=["key"]))
    stored = {
        (SCOPE, window_key(rate)): state for rate, state in zip(windows, states, strict=True) if state is not None
    }
    found = verdict("api", "", {}, Rules(queues={"api": config}), {}, "key=k1", RateStates(stored, now))
    taken = take(states, windows, RATE_COST, now)
    assert found.blocked is not taken.allowed
    (check,) = found.checks
    assert check.scope == SCOPE and check.ok is taken.allowed
    if taken.allowed:
        assert found.reason() is None
        return
    (item,) = found.reason() or []
    assert item["scope"] == SCOPE and item["used"] == item["limit"]
    assert item["next_allowed_in"] == max(0.0, taken.retry_at - now)  # the time take names
    assert item["detail"].startswith("next start allowed in ")


def test_a_queue_without_a_rate_has_no_rate_check_and_no_state_means_room():
    rules = Rules(queues={"api": QueueConfig("api", rate=[Rate(limit=1, per="1m")]), "free": QueueConfig("free")})
    assert verdict("free", "", {}, rules, {}).checks == ()
    (check,) = verdict("api", "", {}, rules, {}, "", RateStates({}, 5.0)).checks
    assert check.ok and (check.scope, check.used, check.limit, check.per) == ("rate:api", 0, 1, 60.0)


def test_a_blocked_rate_is_worded_with_its_window_and_wait():
    rules = Rules(queues={"api": QueueConfig("api", rate=[Rate(limit=60, per="1m", burst=1)])})
    # one start at 100 s: the next is allowed one interval (1 s) later
    states = RateStates({("rate:api", 60 * NS): 101 * NS}, 100.0)
    found = verdict("api", "", {}, rules, {}, "", states)
    (check,) = found.blocking
    assert check.text() == "rate:api 60 of 60 per 1m used; next start allowed in 1.0s"
    assert found.reason() == [
        {
            "scope": "rate:api",
            "used": 60,
            "limit": 60,
            "per": 60.0,
            "next_allowed_in": 1.0,
            "detail": "next start allowed in 1.0s",
        }
    ]
