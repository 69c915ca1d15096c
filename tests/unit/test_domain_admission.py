"""The claim decision against a small, independent reference model (hypothesis).

The reference recomputes every scope from scratch for each candidate (no
incremental counters), so a bookkeeping bug in `admit` shows up as a
disagreement: admitting past a limit, or skipping a run that had room.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tidegate.domain.admission import Candidate, LocalUsage, admit, claim_order
from tidegate.domain.limits import Concurrency, Partition, QueueConfig, RunQueueConfig, TagConcurrencyLimit
from tidegate.domain.scopes import Rules, partition_of

limits = st.one_of(st.none(), st.integers(min_value=1, max_value=4))


@st.composite
def scenarios(draw):
    global_cap = draw(limits)
    tenant_limit = draw(limits)
    prod_limit = draw(limits)
    tag_limits = []
    if tenant_limit is not None:
        tag_limits.append(TagConcurrencyLimit(key="tenant", per_unique_value=True, limit=tenant_limit))
    if prod_limit is not None:
        tag_limits.append(TagConcurrencyLimit(key="env", value="prod", limit=prod_limit))
    queue = QueueConfig(
        "q",
        Concurrency(
            global_limit=draw(limits),
            local_limit=draw(limits),
            partition=Partition(by_args=["c"]) if draw(st.booleans()) else Partition(),
        ),
        max_workers=draw(limits),
        ordering=draw(st.sampled_from(["priority", "fair"])),
    )
    rules = Rules(RunQueueConfig(global_cap, tag_limits), {"q": queue})
    candidates = []
    for index in range(draw(st.integers(min_value=0, max_value=12))):
        tags = {}
        tenant = draw(st.sampled_from([None, "a", "b"]))
        if tenant:
            tags["tenant"] = tenant
        env = draw(st.sampled_from([None, "prod", "dev"]))
        if env:
            tags["env"] = env
        args = {"c": draw(st.integers(min_value=0, max_value=2))}
        candidates.append(
            Candidate(
                id=f"r{index:02d}",
                task="t",
                queue="q",
                partition=partition_of(queue, "t", args, None),
                tags=tags,
                priority=draw(st.integers(min_value=0, max_value=2)),
                scheduled_at=float(draw(st.integers(min_value=0, max_value=5))),
                ordering=queue.ordering,
            )
        )
    running = draw(st.lists(st.sampled_from(candidates), max_size=4, unique_by=lambda c: c.id)) if candidates else []
    capacity = draw(st.integers(min_value=0, max_value=8))
    return rules, candidates, running, capacity


def reference_scopes(rules: Rules, candidate: Candidate) -> dict[str, int]:
    """Scopes and limits written out longhand from the declarations."""
    scopes = {}
    if rules.run_queue.max_concurrent_runs is not None:
        scopes["global"] = rules.run_queue.max_concurrent_runs
    queue = rules.queues[candidate.queue]
    if queue.concurrency.global_limit is not None:
        key = f"queue:q/{candidate.partition}" if candidate.partition else "queue:q"
        scopes[key] = queue.concurrency.global_limit
    for limit in rules.run_queue.tag_concurrency_limits:
        value = candidate.tags.get(limit.key)
        if value is not None and (limit.per_unique_value or value == limit.value):
            scopes[f"tag:{limit.key}={value}"] = limit.limit
    return scopes


def count_in(holders: list[Candidate], rules: Rules, scope: str) -> int:
    return sum(1 for holder in holders if scope in reference_scopes(rules, holder))


@settings(max_examples=400, deadline=None)
@given(scenarios())
def test_admit_agrees_with_the_reference_model(scenario):
    rules, candidates, running, capacity = scenario
    usage: dict[str, int] = {}
    for holder in running:
        for scope in reference_scopes(rules, holder):
            usage[scope] = usage.get(scope, 0) + 1
    # Our own running runs count against this worker's local caps too.
    local = LocalUsage(
        per_queue={"q": len(running)} if running else {},
        per_partition={("q", p): sum(1 for r in running if r.partition == p) for p in {r.partition for r in running}},
    )
    pending = [c for c in candidates if c not in running]
    decision = admit(pending, usage, rules, local, capacity)
    admitted_ids = [candidate.id for candidate, _ in decision.admitted]

    holders = list(running)
    queue = rules.queues["q"]
    for candidate in claim_order(pending):
        scopes = reference_scopes(rules, candidate)
        full = {scope for scope, limit in scopes.items() if count_in(holders, rules, scope) + 1 > limit}
        if full:
            assert candidate.id not in admitted_ids, f"{candidate.id} admitted past {full}"
            assert {s.scope for s in decision.blocked[candidate.id]} == full
            continue
        # Every holder in this model runs on this worker, so local caps count them all.
        local_room = len(holders) < (queue.max_workers or 10**9) and sum(
            1 for h in holders if h.partition == candidate.partition
        ) < (queue.concurrency.local_limit or 10**9)
        has_room = len(holders) - len(running) < capacity and local_room
        assert (candidate.id in admitted_ids) == has_room, f"{candidate.id}: room={has_room}"
        assert candidate.id not in decision.blocked
        if has_room:
            holders.append(candidate)
    for candidate, _ in decision.admitted:
        for scope, limit in reference_scopes(rules, candidate).items():
            assert count_in(holders, rules, scope) <= limit, f"{scope} over {limit}"


def test_fair_order_interleaves_partitions_within_a_priority():
    queue = QueueConfig("q", Concurrency(partition=Partition(by_args=["tenant"])), ordering="fair")
    rules = Rules(RunQueueConfig(max_concurrent_runs=4), {"q": queue})
    big = [Candidate(f"a{i:03d}", "t", "q", "tenant=a", {}, 0, float(i), "fair") for i in range(100)]
    small = [Candidate(f"b{i}", "t", "q", "tenant=b", {}, 0, 1000.0 + i, "fair") for i in range(3)]
    decision = admit(big + small, {}, rules, LocalUsage(), 10)
    assert [c.id for c, _ in decision.admitted] == ["a000", "b0", "a001", "b1"]


def test_priority_order_takes_the_oldest_first_and_skips_blocked_runs():
    queue = QueueConfig("q", Concurrency(global_limit=1, partition=Partition(by_args=["c"])))
    rules = Rules(RunQueueConfig(), {"q": queue})
    runs = [
        Candidate("old-c1", "t", "q", "c=1", {}, 0, 1.0),
        Candidate("newer-c1", "t", "q", "c=1", {}, 0, 2.0),
        Candidate("newest-c2", "t", "q", "c=2", {}, 0, 3.0),
        Candidate("urgent-c1", "t", "q", "c=1", {}, 5, 4.0),
    ]
    decision = admit(runs, {}, rules, LocalUsage(), 10)
    assert [c.id for c, _ in decision.admitted] == ["urgent-c1", "newest-c2"]
    assert set(decision.blocked) == {"old-c1", "newer-c1"}
    assert str(decision.blocked["old-c1"][0]) == "queue:q/c=1 1/1"


def test_a_resumed_parent_goes_first_whatever_the_priority_and_the_fair_turns_but_within_limits():
    older = Candidate("older", "t", "q", "", {}, 0, 1.0)
    urgent = Candidate("urgent", "t", "q", "", {}, 9, 2.0)
    resumed = Candidate("resumed", "t", "q", "", {}, 0, 3.0, resumed=True)
    assert [c.id for c in claim_order([older, urgent, resumed])] == ["resumed", "urgent", "older"]

    lanes = [Candidate(f"a{i}", "t", "q", "tenant=a", {}, 0, float(i), "fair") for i in range(3)]
    back = Candidate("b-resumed", "t", "q", "tenant=b", {}, 0, 9.0, "fair", resumed=True)
    assert [c.id for c in claim_order([*lanes, back], {("q", "tenant=b"): 5})] == ["b-resumed", "a0", "a1", "a2"]

    full = QueueConfig("q", Concurrency(global_limit=1, partition=Partition(by_args=["tenant"])), ordering="fair")
    decision = admit([*lanes, back], {"queue:q/tenant=b": 1}, Rules(RunQueueConfig(), {"q": full}), LocalUsage(), 10)
    assert [c.id for c, _ in decision.admitted] == ["a0"] and "b-resumed" in decision.blocked  # its lane is full


def test_a_paused_queue_admits_nothing_and_leaves_room_to_the_others() -> None:
    """The pause is part of the decision: its runs are skipped (not blocked by a scope), and the
    capacity and the global cap they would have taken go to the other queues' runs."""
    rules = Rules(RunQueueConfig(max_concurrent_runs=2), {"held": QueueConfig("held"), "open": QueueConfig("open")})
    candidates = [
        Candidate(f"{queue}-{index}", "t", queue, "", {}, priority=1 if queue == "held" else 0, scheduled_at=index)
        for queue in ("held", "open")
        for index in range(2)
    ]
    paused = Rules(rules.run_queue, rules.queues, paused=frozenset({"held"}))
    assert [c.id for c, _ in admit(candidates, {}, rules, LocalUsage(), capacity=4).admitted] == ["held-0", "held-1"]
    decision = admit(candidates, {}, paused, LocalUsage(), capacity=4)
    assert [candidate.id for candidate, _ in decision.admitted] == ["open-0", "open-1"]
    assert "held-0" not in decision.blocked
