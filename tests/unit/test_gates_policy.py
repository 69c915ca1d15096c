"""Run-level gates as pure policy (no database): scopes, limits, block reasons, validation.

Which scopes a run needs (`partition_of`, `Rules.scopes_for`), which limit is
in force (code declarations, per-partition overrides, live overrides), why a
run is blocked (`admit`'s saturations), and the River Pro FAQ arithmetic of
global and local limits, checked on `admit` by hand-picked cases and by
hypothesis against closed formulas.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidegate import ConfigurationError, InvalidArgument
from tidegate.domain.admission import Candidate, LocalUsage, admit
from tidegate.domain.limits import (
    Concurrency,
    Partition,
    QueueConfig,
    RunQueueConfig,
    TagConcurrencyLimit,
    check_limit,
    queue_from_dict,
    queue_to_dict,
    run_queue_from_dict,
    run_queue_to_dict,
)
from tidegate.domain.saturation import Saturation
from tidegate.domain.scopes import (
    Rules,
    ScopeNeed,
    check_override_target,
    check_override_value,
    effective_limit,
    partition_of,
    queue_scope,
)

# --- partitions ------------------------------------------------------------------------------


def _queue(name="q", **concurrency):
    return QueueConfig(name, Concurrency(**concurrency))


def test_an_unpartitioned_queue_has_one_lane():
    assert partition_of(_queue(global_limit=3), "t", {"customer_id": 1}, None) == ""
    assert partition_of(None, "t", {"customer_id": 1}, None) == ""  # an undeclared queue
    assert queue_scope("q", "") == "queue:q"
    assert queue_scope("q", "customer_id=1") == "queue:q/customer_id=1"


def test_by_args_names_the_values_and_a_missing_key_is_the_empty_value():
    queue = _queue(global_limit=1, partition=Partition(by_args=["customer_id"]))
    assert partition_of(queue, "t", {"customer_id": 42, "other": 1}, None) == "customer_id=42"
    assert partition_of(queue, "t", {"customer_id": "acme"}, None) == "customer_id=acme"
    # a missing key and an explicit None are the same (empty) value: one shared lane
    assert partition_of(queue, "t", {"other": 1}, None) == "customer_id="
    assert partition_of(queue, "t", {}, None) == "customer_id="
    assert partition_of(queue, "t", {"customer_id": None}, None) == "customer_id="
    # non-string values are written as compact, key-sorted JSON
    assert partition_of(queue, "t", {"customer_id": {"b": 1, "a": [1, 2]}}, None) == 'customer_id={"a":[1,2],"b":1}'
    assert partition_of(queue, "t", {"customer_id": True}, None) == "customer_id=true"


def test_by_args_keeps_the_declared_key_order():
    queue = _queue(global_limit=1, partition=Partition(by_args=["region", "customer_id"]))
    assert partition_of(queue, "t", {"customer_id": 7, "region": "eu"}, None) == "region=eu,customer_id=7"
    assert partition_of(queue, "t", {"customer_id": 7}, None) == "region=,customer_id=7"


def test_by_args_empty_list_partitions_by_every_arg():
    queue = _queue(global_limit=1, partition=Partition(by_args=[]))
    assert partition_of(queue, "t", {"b": "x", "a": 1}, None) == "a=1,b=x"
    assert partition_of(queue, "t", {"a": 1}, None) == "a=1"
    assert partition_of(queue, "t", {}, None) == ""


def test_by_kind_partitions_by_task_and_combines_with_args():
    assert partition_of(_queue(global_limit=1, partition=Partition(by_kind=True)), "mail.send", {"x": 1}, None) == (
        "kind=mail.send"
    )
    both = _queue(global_limit=1, partition=Partition(by_args=["customer_id"], by_kind=True))
    assert partition_of(both, "mail.send", {"customer_id": 3}, None) == "kind=mail.send,customer_id=3"


def test_a_concurrency_key_wins_over_the_declared_partition():
    partitioned = _queue(global_limit=1, partition=Partition(by_args=["customer_id"], by_kind=True))
    assert partition_of(partitioned, "t", {"customer_id": 3}, "tenant-a") == "key=tenant-a"
    assert partition_of(_queue(global_limit=1), "t", {}, "tenant-a") == "key=tenant-a"
    assert partition_of(None, "t", {}, "tenant-a") == "key=tenant-a"


# --- scopes and their limits ------------------------------------------------------------------


def _rules():
    return Rules(
        RunQueueConfig(
            max_concurrent_runs=10,
            tag_concurrency_limits=[
                TagConcurrencyLimit(key="env", value="prod", limit=3),
                TagConcurrencyLimit(key="tenant", per_unique_value=True, limit=2),
            ],
        ),
        {
            "api": QueueConfig(
                "api",
                Concurrency(
                    global_limit=4,
                    local_limit=2,
                    partition=Partition(by_args=["customer_id"]),
                    overrides={"customer_id=big": 8},
                ),
            ),
            "flat": _queue("flat", global_limit=5),
            "free": _queue("free"),
        },
    )


def test_scopes_for_lists_every_limited_scope_in_key_order():
    rules = _rules()
    needs = rules.scopes_for("api", "customer_id=1", {"env": "prod", "tenant": "acme", "color": "red"})
    assert needs == [
        ScopeNeed("global", 10),
        ScopeNeed("queue:api/customer_id=1", 4),
        ScopeNeed("tag:env=prod", 3),
        ScopeNeed("tag:tenant=acme", 2),
    ]
    assert [need.key for need in needs] == sorted(need.key for need in needs)  # the lock order
    # a tag value without a fixed-value limit, and a tag with no limit at all, need nothing
    assert rules.scopes_for("flat", "", {"env": "dev", "color": "red"}) == [
        ScopeNeed("global", 10),
        ScopeNeed("queue:flat", 5),
    ]
    # an unlimited queue adds no scope; with no global cap either, a run needs nothing
    assert rules.scopes_for("free", "", {}) == [ScopeNeed("global", 10)]
    assert Rules().scopes_for("anything", "", {"env": "prod"}) == []


def test_a_concurrency_key_lane_gets_the_queues_limit():
    rules = _rules()
    assert rules.scopes_for("flat", "key=acme", {}) == [ScopeNeed("global", 10), ScopeNeed("queue:flat/key=acme", 5)]


def test_per_partition_overrides_in_code_are_a_tier_above_the_queue_limit():
    rules = _rules()
    assert rules.queue_limit("api", "customer_id=big") == 8
    assert rules.queue_limit("api", "customer_id=small") == 4
    assert rules.local_limit("api") == 2


def test_live_overrides_take_precedence_in_a_fixed_order():
    base = _rules()
    rules = Rules(
        base.run_queue,
        base.queues,
        {
            "global": 7,
            "queue:api": 1,  # every partition of api...
            "queue:api/customer_id=9": 6,  # ...except this exact one
            "tag:tenant": 5,  # every value of a per-unique-value limit...
            "tag:tenant=acme": 9,  # ...except this one
            "tag:env=prod": None,  # unlimited now
        },
    )
    assert rules.global_limit() == 7
    assert rules.queue_limit("api", "customer_id=9") == 6
    assert rules.queue_limit("api", "customer_id=1") == 1
    assert rules.tag_limit("tenant", "acme") == 9
    assert rules.tag_limit("tenant", "globex") == 5
    assert rules.tag_limit("env", "prod") is None
    assert rules.scopes_for("flat", "", {"env": "prod"}) == [ScopeNeed("global", 7), ScopeNeed("queue:flat", 5)]
    assert effective_limit(rules, "global") == 7
    assert effective_limit(rules, "queue:api/customer_id=2") == 1
    assert effective_limit(rules, "tag:tenant") == 5
    assert effective_limit(rules, "tag:tenant=x") == 5
    assert effective_limit(base, "tag:tenant") == 2


def test_a_fixed_value_limit_and_a_per_value_limit_on_one_tag_both_hold():
    """`env=prod` limited to 2 and every env value to 10: a prod run must be held to 2.

    Both limits govern the same scope (`tag:env=prod`), so the tighter one is
    the one in force, whichever is declared first.
    """
    for order in (1, -1):
        declared = [
            TagConcurrencyLimit(key="env", per_unique_value=True, limit=10),
            TagConcurrencyLimit(key="env", value="prod", limit=2),
        ][::order]
        rules = Rules(RunQueueConfig(tag_concurrency_limits=declared))
        assert rules.tag_limit("env", "prod") == 2, f"declared in order {[d.value for d in declared]}"
        assert rules.tag_limit("env", "dev") == 10


# --- block reasons ------------------------------------------------------------------------------


def _candidate(run_id, partition="", tags=None, queue="api", at=0.0, priority=0):
    return Candidate(run_id, "t", queue, partition, tags or {}, priority, at)


def test_a_blocked_run_lists_every_saturated_scope_with_used_and_limit():
    rules = _rules()
    usage = {"global": 9, "queue:api/customer_id=1": 4, "tag:env=prod": 3, "tag:tenant=acme": 1}
    blocked = _candidate("r1", "customer_id=1", {"env": "prod", "tenant": "acme"})
    free = _candidate("r2", "customer_id=2", {"tenant": "acme"}, at=1.0)
    decision = admit([blocked, free], usage, rules, LocalUsage(), capacity=10)
    assert [c.id for c, _ in decision.admitted] == ["r2"]
    assert decision.blocked == {
        "r1": (Saturation("queue:api/customer_id=1", 4, 4), Saturation("tag:env=prod", 3, 3)),
    }
    assert [str(s) for s in decision.blocked["r1"]] == ["queue:api/customer_id=1 4/4", "tag:env=prod 3/3"]


def test_block_reasons_count_the_runs_admitted_earlier_in_the_same_pass():
    rules = _rules()
    runs = [_candidate(f"r{i}", "customer_id=1", {"tenant": "acme"}, at=float(i)) for i in range(4)]
    decision = admit(runs, {"global": 9}, rules, LocalUsage(), capacity=10)
    assert [c.id for c, _ in decision.admitted] == ["r0"]
    assert decision.blocked["r1"] == (Saturation("global", 10, 10),)


def test_a_run_skipped_for_this_workers_capacity_is_not_blocked():
    rules = _rules()
    runs = [_candidate(f"r{i}", f"customer_id={i}", at=float(i)) for i in range(5)]
    decision = admit(runs, {}, rules, LocalUsage(), capacity=2)
    assert len(decision.admitted) == 2
    assert decision.blocked == {}  # it is not waiting on a scope; another worker may take it


def test_a_limit_lowered_below_usage_blocks_with_used_above_limit():
    rules = Rules(RunQueueConfig(max_concurrent_runs=10), {"flat": _queue("flat", global_limit=5)}, {"queue:flat": 2})
    decision = admit([_candidate("r", queue="flat")], {"queue:flat": 4}, rules, LocalUsage(), 5)
    assert decision.admitted == []
    assert decision.blocked == {"r": (Saturation("queue:flat", 4, 2),)}


# --- the River Pro FAQ, case by case ------------------------------------------------------------


def _faq_rules(global_limit=20, local_limit=5, partition=None, max_workers=None, cap=None):
    queue = QueueConfig(
        "q",
        Concurrency(global_limit=global_limit, local_limit=local_limit, partition=partition or Partition()),
        max_workers=max_workers,
    )
    return Rules(RunQueueConfig(max_concurrent_runs=cap), {"q": queue})


def test_faq_global_20_local_5_with_10_running_elsewhere_this_worker_takes_5():
    rules = _faq_rules()
    queued = [_candidate(f"r{i:02d}", queue="q", at=float(i)) for i in range(30)]
    decision = admit(queued, {"queue:q": 10}, rules, LocalUsage(), capacity=50)
    assert len(decision.admitted) == 5
    # if 2 of the 10 are this worker's own, it takes 3 more
    mine = LocalUsage(per_queue={"q": 2}, per_partition={("q", ""): 2})
    assert len(admit(queued, {"queue:q": 10}, rules, mine, capacity=50).admitted) == 3
    # with 18 running, only the 2 slots left globally
    assert len(admit(queued, {"queue:q": 18}, rules, LocalUsage(), capacity=50).admitted) == 2
    assert len(admit(queued, {"queue:q": 20}, rules, LocalUsage(), capacity=50).admitted) == 0


def test_faq_with_partitions_a_worker_fills_up_to_capacity_across_partitions():
    rules = _faq_rules(global_limit=3, local_limit=2, partition=Partition(by_args=["c"]))
    queued = [_candidate(f"r{i:02d}", f"c={i % 4}", queue="q", at=float(i)) for i in range(40)]
    decision = admit(queued, {"queue:q/c=0": 2, "queue:q/c=1": 3}, rules, LocalUsage(), capacity=50)
    per_partition = {}
    for candidate, _ in decision.admitted:
        per_partition[candidate.partition] = per_partition.get(candidate.partition, 0) + 1
    # c=0: 1 left globally; c=1: none; c=2 and c=3: the local limit of 2 binds
    assert per_partition == {"c=0": 1, "c=2": 2, "c=3": 2}
    # a smaller worker stops at its capacity, spread across partitions in claim order
    small = admit(queued, {}, rules, LocalUsage(), capacity=5)
    assert len(small.admitted) == 5
    assert {c.partition for c, _ in small.admitted} == {"c=0", "c=1", "c=2", "c=3"}


@st.composite
def _unpartitioned(draw):
    capacity = draw(st.integers(0, 12))
    local = draw(st.one_of(st.none(), st.integers(1, 8)))
    global_limit = draw(st.one_of(st.none(), st.integers(1, 15)))
    max_workers = draw(st.one_of(st.none(), st.integers(1, 10)))
    used = draw(st.integers(0, global_limit or 15))
    mine = draw(st.integers(0, min(used, local or used, max_workers or used)))
    queued = draw(st.integers(0, 25))
    return capacity, local, global_limit, max_workers, used, mine, queued


@settings(max_examples=300, deadline=None)
@given(_unpartitioned())
def test_faq_without_partitions_a_worker_takes_the_least_of_its_caps(case):
    """min(capacity, max_workers left, local limit left, global limit left, queued)."""
    capacity, local, global_limit, max_workers, used, mine, queued = case
    rules = _faq_rules(global_limit=global_limit, local_limit=local, max_workers=max_workers)
    candidates = [_candidate(f"r{i:02d}", queue="q", at=float(i)) for i in range(queued)]
    usage = {"queue:q": used} if used else {}
    own = LocalUsage(per_queue={"q": mine}, per_partition={("q", ""): mine}) if mine else LocalUsage()
    decision = admit(candidates, usage, rules, own, capacity)
    big = 10**6
    expected = min(
        capacity,
        (max_workers or big) - mine,
        (local or big) - mine,
        (global_limit or big) - used,
        queued,
    )
    assert len(decision.admitted) == max(0, expected)


@st.composite
def _partitioned(draw):
    partitions = draw(st.integers(1, 5))
    capacity = draw(st.integers(0, 15))
    local = draw(st.one_of(st.none(), st.integers(1, 4)))
    global_limit = draw(st.one_of(st.none(), st.integers(1, 5)))
    max_workers = draw(st.one_of(st.none(), st.integers(1, 12)))
    used = [draw(st.integers(0, global_limit or 3)) for _ in range(partitions)]
    counts = [draw(st.integers(0, 6)) for _ in range(partitions)]
    order = draw(st.permutations(range(sum(counts))))
    return partitions, capacity, local, global_limit, max_workers, used, counts, order


@settings(max_examples=300, deadline=None)
@given(_partitioned())
def test_faq_with_partitions_each_partition_is_held_to_its_own_local_and_global_limit(case):
    partitions, capacity, local, global_limit, max_workers, used, counts, order = case
    rules = _faq_rules(
        global_limit=global_limit, local_limit=local, partition=Partition(by_args=["c"]), max_workers=max_workers
    )
    lanes = [p for p in range(partitions) for _ in range(counts[p])]
    candidates = [_candidate(f"r{i:03d}", f"c={lanes[i]}", queue="q", at=float(order[i])) for i in range(len(lanes))]
    usage = {f"queue:q/c={p}": used[p] for p in range(partitions) if used[p]}
    decision = admit(candidates, usage, rules, LocalUsage(), capacity)
    big = 10**6
    taken = [sum(1 for c, _ in decision.admitted if c.partition == f"c={p}") for p in range(partitions)]
    room = [min(local or big, (global_limit or big) - used[p], counts[p]) for p in range(partitions)]
    for p in range(partitions):
        assert taken[p] <= room[p]
    assert sum(taken) == min(capacity, max_workers or big, sum(room))


# --- validation of declarations -------------------------------------------------------------------


@pytest.mark.parametrize("value", [0, -1, -5, 1.5, True, "3", [1]])
def test_a_limit_must_be_a_positive_whole_number(value):
    with pytest.raises(ConfigurationError, match="limit"):
        check_limit("x", value)


def test_minus_one_means_unlimited_only_where_allowed():
    assert check_limit("x", -1, allow_unlimited=True) is None
    assert check_limit("x", None) is None
    assert check_limit("x", 3) == 3
    with pytest.raises(ConfigurationError):
        check_limit("x", -2, allow_unlimited=True)
    with pytest.raises(ConfigurationError):
        check_limit("x", 0, allow_unlimited=True)


@pytest.mark.parametrize("value", [0, -2, 2.5, "10", False])
def test_run_queue_rejects_bad_max_concurrent_runs(value):
    with pytest.raises(ConfigurationError, match="max_concurrent_runs"):
        RunQueueConfig(max_concurrent_runs=value)


def test_run_queue_accepts_unlimited():
    assert RunQueueConfig().max_concurrent_runs is None
    assert RunQueueConfig(max_concurrent_runs=-1).max_concurrent_runs is None
    assert RunQueueConfig(max_concurrent_runs=1).max_concurrent_runs == 1


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"key": "env", "value": "prod", "limit": 0}, "at least 1"),
        ({"key": "env", "value": "prod", "limit": -3}, "at least 1"),
        ({"key": "env", "value": "prod", "limit": None}, "limit"),
        ({"key": "env", "value": "prod", "limit": 1.5}, "whole number"),
        ({"key": "env", "limit": 2}, "per_unique_value"),  # neither a value nor per unique value
        ({"key": "env", "value": "prod", "limit": 2, "per_unique_value": True}, "exclude"),
    ],
    ids=["zero", "negative", "none", "float", "neither", "both"],
)
def test_tag_limit_declarations_are_validated(kwargs, match):
    with pytest.raises(ConfigurationError, match=match):
        TagConcurrencyLimit(**kwargs)


def test_a_tag_key_must_be_a_valid_name():
    with pytest.raises(InvalidArgument):
        TagConcurrencyLimit(key="bad key", value="x", limit=1)


def test_run_queue_rejects_duplicate_or_foreign_tag_limits():
    with pytest.raises(ConfigurationError, match="twice"):
        RunQueueConfig(
            tag_concurrency_limits=[
                TagConcurrencyLimit(key="env", value="prod", limit=1),
                TagConcurrencyLimit(key="env", value="prod", limit=2),
            ]
        )
    with pytest.raises(ConfigurationError, match="TagConcurrencyLimit"):
        RunQueueConfig(tag_concurrency_limits=[{"key": "env", "value": "prod", "limit": 1}])


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"global_limit": 0}, "global_limit"),
        ({"global_limit": -4}, "global_limit"),
        ({"local_limit": 0}, "local_limit"),
        ({"local_limit": -1}, "local_limit"),
        ({"global_limit": 2.0}, "global_limit"),
        ({"global_limit": 2, "overrides": {"customer_id=1": 3}}, "no partition"),
        (
            {"global_limit": 2, "partition": Partition(by_args=["customer_id"]), "overrides": {"tenant=1": 3}},
            "not a partition key",
        ),
        (
            {"global_limit": 2, "partition": Partition(by_args=["customer_id"]), "overrides": {"customer_id": 3}},
            "name=value",
        ),
        ({"global_limit": 2, "partition": Partition(by_args=["customer_id"]), "overrides": {"": 3}}, "name=value"),
        (
            {"global_limit": 2, "partition": Partition(by_args=["customer_id"]), "overrides": {"kind=t": 3}},
            "not a partition key",
        ),
        (
            {"global_limit": 2, "partition": Partition(by_kind=True), "overrides": {"customer_id=1": 3}},
            "not a partition key",
        ),
        (
            {"global_limit": 2, "partition": Partition(by_args=["customer_id"]), "overrides": {"customer_id=1": 0}},
            "at least 1",
        ),
        ({"partition": Partition(by_args=["customer_id"]), "overrides": {"customer_id=1": 3}}, "global_limit"),
    ],
    ids=[
        "global-zero",
        "global-negative",
        "local-zero",
        "local-negative",
        "global-float",
        "override-unpartitioned",
        "override-wrong-key",
        "override-no-value",
        "override-empty",
        "override-kind-not-partitioned",
        "override-arg-on-kind-queue",
        "override-zero",
        "override-without-global",
    ],
)
def test_queue_concurrency_declarations_are_validated(kwargs, match):
    with pytest.raises(ConfigurationError, match=match):
        Concurrency(**kwargs)


def test_an_override_must_name_every_partition_key():
    """With `by_args=["region", "customer_id"]` partitions look like `region=eu,customer_id=7`.

    An override naming only `customer_id=7` (or the keys in another order)
    can never match a partition: accepting it silently ignores the limit.
    """
    partition = Partition(by_args=["region", "customer_id"])
    Concurrency(global_limit=1, partition=partition, overrides={"region=eu,customer_id=7": 4})  # the right form
    rules = Rules(queues={"x": QueueConfig("x", Concurrency(global_limit=1, partition=partition))})
    assert check_override_target("queue:x/region=eu,customer_id=7", rules)
    for key in ("customer_id=7", "customer_id=7,region=eu", "region=eu,region=us"):
        with pytest.raises(ConfigurationError):
            Concurrency(global_limit=1, partition=partition, overrides={key: 4})
        with pytest.raises(ConfigurationError):  # the same form, set live
            check_override_target(f"queue:x/{key}", rules)


def test_by_args_overrides_accept_any_arg_when_partitioned_by_every_arg():
    Concurrency(global_limit=1, partition=Partition(by_args=[]), overrides={"anything=1": 2})
    Concurrency(global_limit=1, partition=Partition(by_args=[], by_kind=True), overrides={"kind=t,a=1": 2})


@pytest.mark.parametrize("by_args", ["customer_id", ["customer_id", ""], [1]])
def test_partition_by_args_must_be_a_list_of_names(by_args):
    with pytest.raises(ConfigurationError, match="by_args"):
        Partition(by_args=by_args)


def test_queue_declarations_are_validated():
    with pytest.raises(ConfigurationError, match="max_workers"):
        QueueConfig("q", max_workers=0)
    with pytest.raises(ConfigurationError, match="ordering"):
        QueueConfig("q", ordering="lifo")
    with pytest.raises(InvalidArgument):
        QueueConfig("bad queue")


def test_declarations_survive_their_stored_form():
    queue = QueueConfig(
        "api",
        Concurrency(
            global_limit=4, local_limit=2, partition=Partition(by_args=["c"], by_kind=True), overrides={"kind=t,c=1": 9}
        ),
        max_workers=3,
        ordering="fair",
    )
    assert queue_from_dict(queue_to_dict(queue)) == queue
    run_queue = RunQueueConfig(
        5, [TagConcurrencyLimit("env", 2, "prod"), TagConcurrencyLimit("t", 1, per_unique_value=True)]
    )
    assert run_queue_from_dict(run_queue_to_dict(run_queue)) == run_queue
    every_arg = QueueConfig("all", Concurrency(global_limit=1, partition=Partition(by_args=[])))
    assert queue_from_dict(queue_to_dict(every_arg)).concurrency.partition.by_args == ()


# --- live override targets ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "target",
    [
        "queue:nope",  # no such queue
        "queue:nope/customer_id=1",
        "queue:api/tenant=1",  # not a partition key of api
        "queue:api/customer_id",  # not name=value
        "queue:flat/customer_id=1",  # flat has no partition
        "queue:",
        "tag:",
        "tag:=prod",
        "tag:env=",
        "globals",
        "pool:db",
        "",
    ],
)
def test_live_override_targets_are_validated(target):
    with pytest.raises(ConfigurationError):
        check_override_target(target, _rules())


@pytest.mark.parametrize(
    "target",
    [
        "global",
        "queue:api",
        "queue:api/customer_id=7",
        "queue:api/key=acme",
        "queue:flat",
        "tag:env=prod",
        "tag:tenant",
    ],
)
def test_valid_live_override_targets_pass(target):
    assert check_override_target(target, _rules()) == target


@pytest.mark.parametrize("value", [0, -2, 1.5, "3", True])
def test_live_override_values_are_validated(value):
    with pytest.raises(ConfigurationError):
        check_override_value("global", value)


def test_live_override_values_may_be_unlimited():
    assert check_override_value("global", None) is None
    assert check_override_value("global", -1) is None
    assert check_override_value("global", 4) == 4
