"""Rates in the claim decision: charged last, all or none with every other scope, per partition."""

from __future__ import annotations

import pytest

from tidegate.domain.admission import Candidate, LocalUsage, admit
from tidegate.domain.claim_plan import plan
from tidegate.domain.errors import ConfigurationError
from tidegate.domain.limits import Concurrency, Partition, QueueConfig, queue_from_dict, queue_to_dict
from tidegate.domain.rates import Rate, window_key
from tidegate.domain.scopes import Rules, rate_partition_of
from tidegate.storage.shared.claiming import reason_json

PER_KEY = QueueConfig("api", rate=[Rate(limit=2, per="1s", burst=2)], rate_partition=Partition(by_args=["key"]))


def candidate(run_id: str, key: str, at: float, queue: str = "api") -> Candidate:
    config = PER_KEY if queue == "api" else None
    return Candidate(
        id=run_id,
        task="t",
        queue=queue,
        partition="",
        tags={},
        priority=0,
        scheduled_at=at,
        rate_partition=rate_partition_of(config, "t", {"key": key}),
    )


def test_a_rate_blocked_partition_does_not_hold_back_another_and_says_when_it_may_start():
    rules = Rules(queues={"api": PER_KEY})
    runs = [candidate(f"a{i}", "k1", i) for i in range(4)] + [candidate("b0", "k2", 10)]
    decision = admit(runs, {}, rules, LocalUsage(), capacity=10, now=100.0)
    assert [c.id for c, _ in decision.admitted] == ["a0", "a1", "b0"]
    reason = decision.blocked["a2"][0]
    # burst 2 of 2, then one per second
    assert reason.scope == "rate:api/key=k1" and reason.per == 1.0 and reason.retry_at == 101.0
    assert str(reason) == "rate:api/key=k1 2 of 2 per 1s used"
    assert decision.next_allowed_at == 101.0
    assert set(decision.rate_states) == {("rate:api/key=k1", window_key(PER_KEY.rate[0])), ("rate:api/key=k2", 10**9)}
    # the stored states carry over: a second later one more of k1 fits (the sustained rate)
    later = admit(runs[2:4], {}, rules, LocalUsage(), 10, rate_states=decision.rate_states, now=101.0)
    assert [c.id for c, _ in later.admitted] == ["a2"]


def test_a_run_held_back_by_a_full_scope_or_a_full_worker_is_not_charged():
    config = QueueConfig("api", concurrency=Concurrency(global_limit=1), rate=[Rate(limit=5, per="1s", burst=5)])
    rules = Rules(queues={"api": config})
    runs = [candidate(f"r{i}", "", i) for i in range(3)]
    decision = admit(runs, {}, rules, LocalUsage(), capacity=10, now=0.0)
    assert [c.id for c, _ in decision.admitted] == ["r0"]
    assert decision.blocked["r1"][0].scope == "queue:api"
    # one unit charged: four more fit at once
    again = admit(
        runs[1:],
        {},
        Rules(queues={"api": QueueConfig("api", rate=config.rate)}),
        LocalUsage(),
        10,
        rate_states=decision.rate_states,
        now=0.0,
    )
    assert len(again.admitted) == 2 and not again.blocked
    full_worker = admit(runs, {}, rules, LocalUsage(), capacity=0, now=0.0)
    assert not full_worker.rate_states


def test_several_windows_all_must_allow():
    config = QueueConfig("api", rate=[Rate(limit=3, per="1s", burst=3), Rate(limit=4, per="1m", burst=4)])
    rules = Rules(queues={"api": config})
    runs = [candidate(f"r{i}", "", i) for i in range(6)]
    first = admit(runs, {}, rules, LocalUsage(), 10, now=0.0)
    assert len(first.admitted) == 3
    second = admit(runs[3:], {}, rules, LocalUsage(), 10, rate_states=first.rate_states, now=5.0)
    assert len(second.admitted) == 1  # the second has room again, the minute only for one
    assert second.blocked["r4"][0].per == 60.0


def test_a_queue_with_a_rate_is_never_free_takes_a_claim_turn_and_its_reason_is_stored_with_its_window():
    rules = Rules(queues={"api": PER_KEY})
    claim = plan(["api"], rules)
    assert claim.limited and not claim.free and claim.turns == ["api"]
    assert not plan(["api"], Rules(queues={"api": QueueConfig("api")})).limited
    decision = admit([candidate(f"a{i}", "k", i) for i in range(3)], {}, rules, LocalUsage(), 5, now=0.0)
    assert '"per":1.0,"retry_at":1.0' in reason_json(decision.blocked["a2"])


def test_rates_are_stored_with_the_queue_and_refused_when_malformed():
    assert queue_from_dict(queue_to_dict(PER_KEY)).rate == (Rate(limit=2, per=1.0, burst=2),)
    assert queue_from_dict(queue_to_dict(PER_KEY)).rate_partition == PER_KEY.rate_partition
    with pytest.raises(ConfigurationError, match="queue api rate: expected Rate"):
        QueueConfig("api", rate=[{"limit": 1}])
    with pytest.raises(ConfigurationError, match="rate_partition needs a rate"):
        QueueConfig("api", rate_partition=Partition(by_args=["k"]))
    with pytest.raises(ConfigurationError, match=r"Rate\.per"):
        QueueConfig("api", rate=[Rate(limit=1, per="fortnight")])
