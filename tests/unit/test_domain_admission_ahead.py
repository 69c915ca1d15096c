"""Runs a claim decision takes ahead of the worker's free slots (`admit(..., ahead=)`), hypothesis.

A worker whose runs end fast claims more than its free slots (`CycleRequest.claim_ahead`): the
runs past them wait on the worker for a slot, holding a slot of every scope they need. Under
limits that do not bind they may, as long as they cost nobody a start: for any rules, usage,
runs, capacity and ahead, the decision (a) takes at most capacity + ahead runs, (b) puts no scope
over its limit, (c) leaves in every scope at least as much room as the runs it took ahead there
(half the room they found, at most), (d) takes none ahead that a tag's rate charges, that a
per-worker cap or a fair order counts, or that is a suspect, and charges a queue's rate on a run
it takes ahead only with a lead (`Admission.leads`, domain/rate_charger.py), and (e) is, up to the
free slots, the decision made with none ahead (which tests/unit/test_domain_admission.py pins to
a reference model), charging the rates alike when it took no rated run ahead. A
plan that says no run of its queues can wait ahead (`ClaimPlan.takes_ahead`) is never wrong.
"""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from tidegate.domain import ahead, rate_charger
from tidegate.domain.admission import Candidate, LocalUsage, admit
from tidegate.domain.claim_plan import plan
from tidegate.domain.limits import (
    Concurrency,
    Partition,
    QueueConfig,
    RunQueueConfig,
    TagConcurrencyLimit,
    TagRateLimit,
)
from tidegate.domain.rates import Rate
from tidegate.domain.scopes import GLOBAL, TAG_RATE_PREFIX, Rules, queue_scope
from tidegate.storage.shared import claiming

QUEUES = ("a", "b")
PARTITIONS = ("", "c=1", "c=2")
TENANTS = ("acme", "globex")
limits = st.none() | st.integers(min_value=1, max_value=12)
rare = st.none() | st.none() | st.none() | st.integers(min_value=1, max_value=4)  # most queues may wait ahead
LOOSE = Rate(limit=1_000_000, per="1s")  # a rate that never binds: only the exclusion holds runs back


@st.composite
def queue_configs(draw: st.DrawFn, name: str) -> QueueConfig:
    concurrency = Concurrency(
        global_limit=draw(limits),
        local_limit=draw(rare),
        partition=Partition(by_args=["c"]) if draw(st.booleans()) else Partition(),
    )
    return QueueConfig(
        name,
        concurrency,
        max_workers=draw(rare),
        ordering=draw(st.sampled_from(["priority", "priority", "priority", "fair"])),
        rate=(LOOSE,) if draw(st.integers(min_value=0, max_value=3)) == 0 else (),
    )


@st.composite
def rules(draw: st.DrawFn) -> Rules:
    tag = draw(limits)
    run_queue = RunQueueConfig(
        max_concurrent_runs=draw(limits),
        tag_concurrency_limits=[] if tag is None else [TagConcurrencyLimit("tenant", limit=tag, per_unique_value=True)],
        tag_rate_limits=[TagRateLimit("tenant", 1_000_000, "1s", value="acme")] if draw(st.booleans()) else [],
    )
    overrides = draw(st.dictionaries(st.sampled_from([GLOBAL, "queue:a", "tag:tenant=globex"]), limits, max_size=1))
    return Rules(run_queue, {name: draw(queue_configs(name)) for name in QUEUES}, overrides)


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[Rules, list[Candidate], dict[str, int], LocalUsage, int, int]:
    given_rules = draw(rules())
    runs = []
    for n in range(draw(st.integers(min_value=0, max_value=24))):
        queue = draw(st.sampled_from(QUEUES))
        config = given_rules.queues[queue]
        partitioned = config.concurrency.partition.enabled
        runs.append(
            Candidate(
                id=f"r{n:02d}",
                task="t",
                queue=queue,
                partition=draw(st.sampled_from(PARTITIONS[1:] if partitioned else PARTITIONS[:1])),
                tags=draw(st.dictionaries(st.just("tenant"), st.sampled_from(TENANTS), max_size=1)),
                priority=draw(st.integers(min_value=0, max_value=1)),
                scheduled_at=float(n),
                ordering=config.ordering,
                suspect=draw(st.integers(min_value=0, max_value=5)) == 0,
                group=draw(st.sampled_from(["g1", "g2"])),
            )
        )
    scopes = [GLOBAL, *(queue_scope(q, p) for q in QUEUES for p in PARTITIONS)]
    scopes += [f"tag:tenant={tenant}" for tenant in TENANTS]
    usage = draw(st.fixed_dictionaries({scope: st.integers(min_value=0, max_value=8) for scope in scopes}))
    per_queue = draw(st.dictionaries(st.sampled_from(QUEUES), st.integers(min_value=0, max_value=2)))
    local = LocalUsage(per_queue, {}, draw(st.sampled_from([None, "g1"])))
    capacity = draw(st.integers(min_value=0, max_value=6))
    ahead = draw(st.integers(min_value=0, max_value=16))
    return given_rules, runs, usage, local, capacity, ahead


def _waits_ahead(given_rules: Rules, candidate: Candidate) -> bool:
    """Whether the rules let the run wait ahead at all, written out longhand."""
    return not (
        candidate.suspect
        or candidate.ordering == "fair"
        or given_rules.max_workers(candidate.queue) is not None
        or given_rules.local_limit(candidate.queue) is not None
        or any(
            scope.startswith(TAG_RATE_PREFIX)
            for scope, _ in given_rules.rate_scopes(candidate.queue, candidate.rate_partition, candidate.tags)
        )
    )


def _check(scenario: tuple[Rules, list[Candidate], dict[str, int], LocalUsage, int, int]) -> None:
    given_rules, runs, usage, local, capacity, ahead = scenario
    decision = admit(runs, usage, given_rules, local, capacity, now=1000.0, ahead=ahead)
    admitted = decision.admitted
    assert len(admitted) <= capacity + ahead  # (a)
    limit_of = {need.key: need.limit for _, needs in admitted for need in needs}
    taken = Counter(need.key for _, needs in admitted for need in needs)
    taken_ahead = Counter(need.key for _, needs in admitted[capacity:] for need in needs)
    for key, limit in limit_of.items():
        assert usage.get(key, 0) + taken[key] <= limit, (key, "over its limit")  # (b)
        left = limit - usage.get(key, 0) - taken[key]
        assert taken_ahead[key] <= left, (key, taken_ahead[key], "ahead, room left", left)  # (c)
    for candidate, _ in admitted[capacity:]:
        assert _waits_ahead(given_rules, candidate), candidate  # (d)
        if given_rules.rate_scopes(candidate.queue, candidate.rate_partition, candidate.tags):
            assert decision.leads.get(candidate.id, 0) > 0, (candidate, "rated, taken ahead with no lead")
    plain = admit(runs, usage, given_rules, local, capacity, now=1000.0)  # (e)
    assert admit(runs, usage, given_rules, local, capacity, now=1000.0, ahead=0) == plain
    assert admitted[: len(plain.admitted)] == plain.admitted
    if len(plain.admitted) < capacity:
        assert admitted == plain.admitted  # short of the free slots: nothing past them
    if not decision.leads:
        assert decision.rate_states == plain.rate_states and decision.next_allowed_at == plain.next_allowed_at


@settings(max_examples=400, deadline=None)
@given(scenarios())
def test_runs_taken_ahead_keep_every_limit_and_half_its_room_and_skip_what_must_not_wait(scenario):
    _check(scenario)


@settings(max_examples=300, deadline=None)
@given(scenarios(), st.lists(st.sampled_from(QUEUES), min_size=1, max_size=2, unique=True))
def test_a_plan_that_takes_none_ahead_is_a_claim_that_could_take_none(scenario, queues):
    """`ClaimPlan.takes_ahead` False (a claim then sized and read as if none were asked for:
    `claiming.admit_sizes`): `admit` takes no run of those queues ahead, however many it may."""
    given_rules, runs, usage, local, capacity, ahead = scenario
    if plan(queues, given_rules).takes_ahead:
        return
    runs = [run for run in runs if run.queue in queues]
    assert admit(runs, usage, given_rules, local, capacity, now=1000.0, ahead=ahead) == admit(
        runs, usage, given_rules, local, capacity, now=1000.0
    )


@settings(max_examples=300, deadline=None)
@given(scenarios())
def test_a_claims_reads_bounded_by_a_binding_queue_limit_lose_no_run_it_could_take(scenario):
    """`ClaimPlan.most_ahead` sizes a claim's reads (`claiming.admit_sizes`): whatever the usage,
    `admit` with the ahead cut to it decides as with all asked for (a claim with a free slot)."""
    given_rules, runs, usage, local, capacity, asked = scenario
    most = plan(QUEUES, given_rules).most_ahead
    if capacity < 1 or most is None or most >= asked:
        return
    assert admit(runs, usage, given_rules, local, capacity, now=1000.0, ahead=most) == admit(
        runs, usage, given_rules, local, capacity, now=1000.0, ahead=asked
    )


@pytest.mark.parametrize("limit", range(1, 13))
def test_the_bound_of_a_binding_queue_limit_is_what_a_claim_of_one_free_slot_takes(limit):
    """The bound is reached: nothing in use, one free slot taken, then half the room left ahead."""
    rules = Rules(RunQueueConfig(), {"a": QueueConfig("a", Concurrency(global_limit=limit))})
    runs = [Candidate(f"r{n:02d}", "t", "a", "", {}, 0, float(n)) for n in range(30)]
    decision = admit(runs, {}, rules, LocalUsage(), 1, now=1000.0, ahead=30)
    assert len(decision.admitted) - 1 == plan(["a"], rules).most_ahead == (limit - 1) // 2


def test_a_binding_queue_limit_bounds_what_a_claim_reads_ahead():
    """W1's queue limit of 4: a claim for 10 free slots and 40 ahead reads for 10 + 1, not 50."""
    rules = Rules(RunQueueConfig(), {"a": QueueConfig("a", Concurrency(global_limit=4))})
    assert claiming.admit_sizes(plan(["a"], rules), 50, 40) == (10, 1)
    loose = Rules(
        RunQueueConfig(), {"a": QueueConfig("a", Concurrency(global_limit=4, partition=Partition(by_args=["c"])))}
    )
    assert claiming.admit_sizes(plan(["a"], loose), 50, 40) == (10, 40)  # per partition: no bound for the claim


def _cost_of_limits_rules() -> Rules:
    """benchmarks/cost_of_limits.py's limits: a global cap of 1000, 100 per customer, 200 per tenant."""
    queue = QueueConfig("a", Concurrency(global_limit=100, partition=Partition(by_args=["customer"])))
    tags = [TagConcurrencyLimit("tenant", limit=200, per_unique_value=True)]
    return Rules(RunQueueConfig(max_concurrent_runs=1000, tag_concurrency_limits=tags), {"a": queue})


def _benchmark_runs(count: int) -> list[Candidate]:
    """Submitted as the benchmark does: 100 runs a tenant in turn, customers c0..c9 round."""
    return [
        Candidate(f"r{n:04d}", "t", "a", f"customer=c{n % 10}", {"tenant": f"t{n // 100 % 10}"}, 0, float(n))
        for n in range(count)
    ]


def test_limits_that_do_not_bind_let_the_whole_claim_ahead_through():
    """The benchmark's drain at max_workers=64: a claim for 64 free slots and 256 ahead takes 320."""
    decision = admit(_benchmark_runs(400), {}, _cost_of_limits_rules(), LocalUsage(), 64, ahead=256)
    assert len(decision.admitted) == 320 and not decision.blocked


@pytest.mark.parametrize("removed", [False, True], ids=["intact", "removed"])
def test_a_nearly_full_limit_lets_runs_wait_ahead_in_half_its_room(monkeypatch, removed):
    """Tenant t0 holds 150 of its 200: 8 free slots take 8 (room 42 left), then 21 ahead leave 21.
    Without the bound (the mutation) the tag fills: 8 + 32 taken, 2 slots left, 32 runs waiting."""
    if removed:
        monkeypatch.setattr(ahead.WorkerRoom, "leaves_room", lambda *_: True)
    runs = _benchmark_runs(100)
    decision = admit(runs, {"tag:tenant=t0": 150}, _cost_of_limits_rules(), LocalUsage(), 8, ahead=32)
    assert len(decision.admitted) == (40 if removed else 29)


@pytest.mark.parametrize("removed", ["half the room", "the rate"])
def test_the_property_fails_without_each_rule(monkeypatch, removed):
    """Mutations: each rule taken out, the property test finds a counterexample."""
    if removed == "half the room":
        monkeypatch.setattr(ahead.WorkerRoom, "leaves_room", lambda *_: True)
    else:
        monkeypatch.setattr(rate_charger.RateCharger, "ahead_lead", lambda *_: 0)
    # No shrinking: the counterexample's existence is the point, and shrinking it takes seconds.
    quick = settings(max_examples=500, deadline=None, database=None, phases=[Phase.generate])
    found = quick(given(scenarios())(_check))
    with pytest.raises(AssertionError):
        found()
