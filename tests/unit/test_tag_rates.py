"""Tag rates: a rate per tag value shared by every queue, charged with the queue's rate, all or none."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidegate.domain.admission import Candidate, LocalUsage, admit
from tidegate.domain.blocking import verdict
from tidegate.domain.errors import ConfigurationError
from tidegate.domain.limits import (
    QueueConfig,
    RunQueueConfig,
    TagRateLimit,
    run_queue_from_dict,
    run_queue_to_dict,
)
from tidegate.domain.rates import Rate, RateStates
from tidegate.domain.scopes import Rules

PER_TENANT = TagRateLimit(key="tenant", per_unique_value=True, limit=2, per="1s", burst=2)


def run(run_id: str, tenant: str, queue: str = "a", at: float = 0.0) -> Candidate:
    return Candidate(
        id=run_id, task="t", queue=queue, partition="", tags={"tenant": tenant}, priority=0, scheduled_at=at
    )


def test_a_tenant_rate_is_shared_by_every_queue_and_holds_no_other_tenant_back() -> None:
    rules = Rules(RunQueueConfig(tag_rate_limits=[PER_TENANT]))
    runs = [
        run("a1", "acme", "a", 0),
        run("b1", "acme", "b", 1),
        run("a2", "acme", "a", 2),
        run("g1", "globex", "b", 3),
    ]
    decision = admit(runs, {}, rules, LocalUsage(), capacity=10, now=100.0)
    assert [c.id for c, _ in decision.admitted] == ["a1", "b1", "g1"]
    (reason,) = decision.blocked["a2"]
    assert reason.scope == "rate:tag:tenant=acme" and reason.per == 1.0 and reason.retry_at == 101.0
    assert decision.next_allowed_at == 101.0
    assert {scope for scope, _ in decision.rate_states} == {"rate:tag:tenant=acme", "rate:tag:tenant=globex"}


def test_a_fixed_value_rate_binds_only_that_value() -> None:
    rules = Rules(RunQueueConfig(tag_rate_limits=[TagRateLimit("tenant", 1, "1m", value="acme")]))
    runs = [run("a1", "acme"), run("a2", "acme", at=1), run("g1", "globex", at=2), run("g2", "globex", at=3)]
    decision = admit(runs, {}, rules, LocalUsage(), capacity=10, now=0.0)
    assert [c.id for c, _ in decision.admitted] == ["a1", "g1", "g2"]


def test_the_queue_rate_and_the_tag_rate_are_charged_all_or_none() -> None:
    """A start the queue's rate refuses takes nothing of its tag's rate, and the other way round."""
    queue = QueueConfig("a", rate=Rate(limit=1, per="1m", burst=1))
    rules = Rules(RunQueueConfig(tag_rate_limits=[PER_TENANT]), {"a": queue})
    first = admit([run("a1", "acme"), run("a2", "acme", at=1)], {}, rules, LocalUsage(), 10, now=0.0)
    assert [c.id for c, _ in first.admitted] == ["a1"]
    assert [s.scope for s in first.blocked["a2"]] == ["rate:a"]  # the tenant had room: not named
    charged = {scope: tat for (scope, _), tat in first.rate_states.items()}
    assert set(charged) == {"rate:a", "rate:tag:tenant=acme"}
    assert first.charges["a1"] and {charge.scope for charge in first.charges["a1"]} == set(charged)
    # a2 was refused by the queue's rate: acme's state is a1's charge alone (one of its burst of 2)
    other = admit([run("b1", "acme", "b")], {}, rules, LocalUsage(), 10, rate_states=first.rate_states, now=0.0)
    assert [c.id for c, _ in other.admitted] == ["b1"]
    # now acme is spent too: both rates refuse a2, and both are named
    stored = {**first.rate_states, **other.rate_states}  # a decision's states are the windows it charged
    both = admit([run("a2", "acme")], {}, rules, LocalUsage(), 10, rate_states=stored, now=0.0)
    assert [s.scope for s in both.blocked["a2"]] == ["rate:a", "rate:tag:tenant=acme"]
    assert both.next_allowed_at == max(s.retry_at or 0 for s in both.blocked["a2"])


def test_the_verdict_names_a_tag_rate_as_the_claim_refuses_it() -> None:
    rules = Rules(RunQueueConfig(tag_rate_limits=[PER_TENANT]))
    decision = admit([run("a1", "acme"), run("a2", "acme", at=1)], {}, rules, LocalUsage(), 10, now=5.0)
    states = RateStates(decision.rate_states, 5.0)
    held = verdict("b", "", {"tenant": "acme"}, rules, {}, "", states)
    assert held.blocked
    (item,) = held.reason() or []
    assert item["scope"] == "rate:tag:tenant=acme" and item["used"] == item["limit"] == 2
    assert item["next_allowed_in"] == pytest.approx(1.0)
    assert not verdict("b", "", {"tenant": "globex"}, rules, {}, "", states).blocked
    assert not verdict("b", "", {}, rules, {}, "", states).blocked


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"limit": 0, "per": "1s", "per_unique_value": True}, r"tag rate tenant: Rate\.limit"),
        ({"limit": -3, "per": "1s", "per_unique_value": True}, r"tag rate tenant: Rate\.limit"),
        ({"limit": 5, "per": "soon", "per_unique_value": True}, r"tag rate tenant: Rate\.per"),
        ({"limit": 5, "per": "1s", "per_unique_value": True, "burst": 6}, r"tag rate tenant: Rate\.burst"),
        ({"limit": 5, "per": "1s"}, "give value=... .* or per_unique_value=True"),
        ({"limit": 5, "per": "1s", "value": "acme", "per_unique_value": True}, "exclude each other"),
    ],
)
def test_a_bad_tag_rate_is_refused_naming_what_is_wrong(arguments: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        TagRateLimit(key="tenant", **arguments)  # type: ignore[arg-type]


def test_two_rates_of_one_window_for_one_value_are_refused_and_several_windows_are_kept() -> None:
    hourly = TagRateLimit("tenant", 100, "1h", per_unique_value=True)
    with pytest.raises(ConfigurationError, match="tag rate tenant: two rates with the window 1s"):
        RunQueueConfig(tag_rate_limits=[PER_TENANT, TagRateLimit("tenant", 9, "1s", value="acme")])
    with pytest.raises(ConfigurationError, match="expected TagRateLimit"):
        RunQueueConfig(tag_rate_limits=[Rate(1, "1s")])  # type: ignore[list-item]
    minute = TagRateLimit("tenant", 9, "1m", value="x")
    rules = Rules(RunQueueConfig(tag_rate_limits=[PER_TENANT, hourly, minute]))
    assert [rate.seconds for rate in rules.tag_rates("tenant", "acme")] == [1.0, 3600.0]
    assert [rate.seconds for rate in rules.tag_rates("tenant", "x")] == [1.0, 3600.0, 60.0]
    assert rules.tag_rates("region", "x") == ()


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.builds(
            TagRateLimit,
            key=st.sampled_from(["tenant", "region"]),
            limit=st.integers(1, 100),
            per=st.sampled_from(["1s", "1m", "1h"]),
            per_unique_value=st.just(True),
        ),
        max_size=3,
        unique_by=lambda limit: (limit.key, limit.per),
    )
)
def test_tag_rates_survive_the_stored_form(declared: list[TagRateLimit]) -> None:
    config = RunQueueConfig(tag_rate_limits=declared)
    back = run_queue_from_dict(run_queue_to_dict(config))
    assert [_window(limit.rate) for limit in back.tag_rate_limits] == [_window(limit.rate) for limit in declared]
    assert [(limit.key, limit.per_unique_value, limit.value) for limit in back.tag_rate_limits] == [
        (limit.key, limit.per_unique_value, limit.value) for limit in declared
    ]


def _window(rate: Rate) -> tuple[int, float, int]:
    return rate.limit, rate.seconds, rate.allowed_burst
