"""Rates in the claim decision: charged last, all or none with every other scope, per partition."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidegate.domain.admission import Candidate, LocalUsage, admit
from tidegate.domain.claim_plan import plan
from tidegate.domain.errors import ConfigurationError
from tidegate.domain.limits import (
    Concurrency,
    Partition,
    QueueConfig,
    RunQueueConfig,
    TagRateLimit,
    queue_from_dict,
    queue_to_dict,
)
from tidegate.domain.rate_charger import rate_saturation
from tidegate.domain.rates import NS, Rate, held, interval, take, to_ns, window_key
from tidegate.domain.scopes import Rules, rate_partition_of, rate_scope
from tidegate.storage.shared.claiming import changed_block_reasons, reason_json

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
    assert claim.limited and not claim.free and claim.claim_turns == ["api"]
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


# --- a claim that reads many runs one rate refuses ---------------------------------------------

WEIGHTED = QueueConfig(
    "api",
    rate=[Rate(limit=6, per="1s", burst=3), Rate(limit=20, per="1m", burst=4)],
    rate_partition=Partition(by_args=["key"]),
)
TENANTS = RunQueueConfig(
    tag_rate_limits=[TagRateLimit(key="tenant", per_unique_value=True, limit=4, per="1s", burst=2)]
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from(["k1", "k2"]), st.sampled_from(["", "acme"]), st.integers(1, 4)), max_size=14),
    st.dictionaries(
        st.sampled_from(["rate:api/key=k1", "rate:api/key=k2", "rate:tag:tenant=acme"]),
        st.integers(0, 3 * 10**9),
    ),
)
def test_admit_refuses_and_explains_each_run_as_a_fresh_charge_at_its_turn_would(runs, stored):
    """The refusals admit remembers until the next charge give the answer GCRA gives each run afresh,
    in claim order, on the states the runs before it left: which are admitted, each refusal's
    windows and retry time, and the next allowed time (a memo kept past a charge, or keyed
    without the cost, fails here)."""
    rules = Rules(TENANTS, {"api": WEIGHTED})
    candidates = [
        replace(candidate(f"r{i}", key, i), rate_cost=cost, tags={"tenant": tenant} if tenant else {})
        for i, (key, tenant, cost) in enumerate(runs)
    ]
    states = {(scope, window_key(rate)): tat for scope, tat in stored.items() for rate in _windows(rules, scope)}
    decision = admit(candidates, {}, rules, LocalUsage(), capacity=100, rate_states=states, now=1.5)
    expected_admitted, expected_blocked, state = [], {}, dict(states)
    for run in candidates:
        scopes = rules.rate_scopes(run.queue, run.rate_partition, run.tags)
        keys = [(scope, window_key(rate)) for scope, windows in scopes for rate in windows]
        windows = [rate for _, scope_windows in scopes for rate in scope_windows]
        taken = take([state.get(key) for key in keys], windows, run.rate_cost, 1.5)
        if taken.allowed:
            expected_admitted.append(run.id)
            state.update(zip(keys, taken.states, strict=True))
            continue
        expected_blocked[run.id] = tuple(
            rate_saturation(scope, refused)
            for scope, scope_windows in scopes
            if (
                refused := held(
                    [state.get((scope, window_key(r))) for r in scope_windows], scope_windows, run.rate_cost, 1.5
                )
            )
            is not None
        )
    assert [c.id for c, _ in decision.admitted] == expected_admitted
    assert decision.blocked == expected_blocked
    assert decision.rate_states == {key: tat for key, tat in state.items() if states.get(key) != tat}
    retry = [
        max(s.retry_at for s in reasons if s.retry_at is not None)
        for reasons in expected_blocked.values()
        if None not in {s.retry_at for s in reasons}
    ]
    # the worker comes back when a claim's worth of held runs may start: never before the first
    assert (decision.next_allowed_at is None) == (not retry)
    assert decision.next_allowed_at is None or decision.next_allowed_at >= min(retry)


def test_a_worker_comes_back_when_half_the_burst_or_every_held_run_may_start():
    """`next_allowed_at` gathers a claim's worth of tokens: at 200/s with a burst of 10 (an interval
    of 1/191 s), five starts; two when only two runs wait; one with a burst of 1."""
    paced = QueueConfig("api", rate=[Rate(limit=200, per="1s", burst=10)])
    rules = Rules(queues={"api": paced})
    runs = [replace(candidate(f"r{i}", "", i), rate_partition="") for i in range(64)]
    first = admit(runs, {}, rules, LocalUsage(), 64, now=10.0)
    assert len(first.admitted) == 10  # the burst
    step = interval(paced.rate[0]) / NS
    tat = first.rate_states[("rate:api", NS)] / NS  # ten intervals on
    assert first.next_allowed_at == pytest.approx(tat - 5 * step)  # five tokens back
    two = admit(runs[10:12], {}, rules, LocalUsage(), 64, rate_states=first.rate_states, now=10.0)
    assert two.next_allowed_at == pytest.approx(tat - 8 * step)
    full = admit(runs[10:], {}, rules, LocalUsage(), 1, rate_states=first.rate_states, now=10.0)
    assert full.next_allowed_at == pytest.approx(tat - 9 * step)  # room for one: one token
    even = Rules(queues={"api": QueueConfig("api", rate=[Rate(limit=200, per="1s", burst=1)])})
    spaced = admit(runs[:3], {}, even, LocalUsage(), 64, now=10.0)
    assert spaced.next_allowed_at == pytest.approx(10.0 + 1 / 200)
    assert spaced.next_allowed_at == spaced.blocked["r1"][0].retry_at


def _windows(rules: Rules, scope: str) -> tuple[Rate, ...]:
    return (TENANTS.tag_rate_limits[0].rate,) if scope.startswith("rate:tag:") else WEIGHTED.rate


def test_a_rate_held_runs_reason_is_rewritten_when_its_scopes_change_not_when_its_retry_time_moves():
    rules = Rules(queues={"api": PER_KEY})
    runs = [candidate(f"a{i}", "k", i) for i in range(4)]
    first = admit(runs, {}, rules, LocalUsage(), 10, now=0.0)
    stored = {run_id: reason_json(reasons) for run_id, reasons in first.blocked.items()}
    assert set(stored) == {"a2", "a3"} and first.blocked["a3"][0].retry_at == 1.0
    # a second on, a2 is charged: a3's retry time moved, its reason (rate, window, count) did not
    charged = admit(runs[2:], {}, rules, LocalUsage(), 10, rate_states=first.rate_states, now=1.0)
    assert [c.id for c, _ in charged.admitted] == ["a2"] and charged.blocked["a3"][0].retry_at == 2.0
    assert changed_block_reasons(charged, stored) == {}
    # held by a full concurrency limit too: another reason, rewritten
    both = QueueConfig("api", Concurrency(global_limit=1), rate=PER_KEY.rate, rate_partition=PER_KEY.rate_partition)
    full = admit(runs[3:], {"queue:api": 1}, Rules(queues={"api": both}), LocalUsage(), 10, now=5.0)
    assert set(changed_block_reasons(full, stored)) == {"a3"}
    assert changed_block_reasons(first, {}) == stored  # a run with no stored reason gets one


def test_each_rate_partition_is_judged_on_its_own_room_for_runs_taken_ahead():
    """Rate(60, '1m', burst=10) per key: key a fresh, key b with 7 of its burst used. A claim for
    one free slot and 4 ahead takes a's runs ahead (with a lead) and none of b's: b's window has
    used more than half its burst (`rates.roomy`), whatever a's answer was."""
    config = QueueConfig("api", rate=[Rate(limit=60, per="1m", burst=10)], rate_partition=Partition(by_args=["key"]))
    rules = Rules(queues={"api": config})
    rate = config.rate[0]
    now = 1000.0
    states = {(rate_scope("api", "key=b"), window_key(rate)): to_ns(now) + 7 * interval(rate)}
    runs = [candidate(f"r{n}", key, float(n)) for n, key in enumerate(["a", "b", "a", "b", "a", "b"])]
    decision = admit(runs, {}, rules, LocalUsage(), 1, rate_states=states, now=now, ahead=4)
    assert [run.id for run, _ in decision.admitted] == ["r0", "r2", "r4"]
    assert set(decision.leads) == {"r2", "r4"}
