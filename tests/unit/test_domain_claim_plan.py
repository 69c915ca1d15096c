"""The claim plan (`domain.claim_plan`) pinned to the claim's decision (`domain.admission.admit`).

Every shortcut a claim takes before SQL rests on the plan: the one-statement
claim on `free`, the look and `more` on `closures`, the forecast and the
locks on the lock order, the reads on `local_counts`, `fair_lanes` and
`needed_keys`. Each property says what `admit` would do with what the
shortcut skips, for any rules, usage and runs, read by the claim or not; and a
queue the plan calls closed by a full scope is blocked by that scope in the
verdict every surface shows (`domain.blocking.verdict`).
"""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tidegate.domain.admission import Candidate, LocalUsage, admit, claim_order
from tidegate.domain.blocking import verdict
from tidegate.domain.claim_plan import FULL, PAUSED, ClaimPlan, lock_steps, own_queue, plan
from tidegate.domain.limits import (
    Concurrency,
    Partition,
    QueueConfig,
    RunQueueConfig,
    TagConcurrencyLimit,
    TagRateLimit,
)
from tidegate.domain.scopes import GLOBAL, Rules, queue_scope

QUEUES = ("a", "b", "c")
PARTITIONS = ("", "c=1", "c=2", "key=k1", "key=k2")
TENANTS = ("acme", "globex")
limits = st.none() | st.integers(min_value=1, max_value=3)
rare = st.none() | st.none() | st.integers(min_value=1, max_value=3)  # mostly unlimited: free plans happen


@st.composite
def queue_configs(draw: st.DrawFn, name: str) -> QueueConfig | None:
    if draw(st.booleans()):
        return None
    partitioned = draw(st.booleans())
    concurrency = Concurrency(
        global_limit=draw(rare),
        local_limit=draw(st.none() | st.integers(min_value=1, max_value=3)) if draw(st.booleans()) else None,
        partition=Partition(by_args=["c"]) if partitioned else Partition(),
    )
    max_workers = draw(st.none() | st.integers(min_value=1, max_value=3)) if draw(st.booleans()) else None
    ordering = draw(st.sampled_from(["priority", "priority", "fair"]))
    return QueueConfig(name, concurrency, max_workers=max_workers, ordering=ordering)


def _tenant_rate(limit: int) -> TagRateLimit:
    """A rate per tenant that a second start of one tenant at one instant exceeds (burst 1)."""
    return TagRateLimit(key="tenant", per_unique_value=True, limit=limit, per="1s", burst=1)


@st.composite
def rules(draw: st.DrawFn) -> Rules:
    tag = draw(rare)
    tenants = [] if tag is None else [TagConcurrencyLimit(key="tenant", per_unique_value=True, limit=tag)]
    tag_rate = draw(rare)
    tenant_rates = [] if tag_rate is None else [_tenant_rate(tag_rate)]
    run_queue = RunQueueConfig(
        max_concurrent_runs=draw(rare), tag_concurrency_limits=tenants, tag_rate_limits=tenant_rates
    )
    queues = {name: config for name in QUEUES if (config := draw(queue_configs(name))) is not None}
    targets = [GLOBAL, *(f"queue:{name}" for name in QUEUES), "tag:tenant=acme"]
    overrides = draw(st.dictionaries(st.sampled_from(targets), limits, max_size=1)) if draw(st.booleans()) else {}
    paused = frozenset(draw(st.sets(st.sampled_from(QUEUES), max_size=1)))
    return Rules(run_queue, queues, overrides, paused)


@st.composite
def sparse_rules(draw: st.DrawFn) -> Rules:
    """Rules with at most one limit of any kind (so plans are often free, and each kind of limit
    is met alone): a kind the plan forgot would make a free plan that `admit` contradicts."""
    knob = draw(
        st.sampled_from([None, "global", "tag", "tag_rate", "queue", "local", "max_workers", "fair", "override"])
    )
    queue = draw(st.sampled_from(QUEUES))
    one = draw(st.integers(min_value=1, max_value=2))
    concurrency = Concurrency(
        global_limit=one if knob == "queue" else None,
        local_limit=one if knob == "local" else None,
        partition=Partition(by_args=["c"]) if draw(st.booleans()) else Partition(),
    )
    config = QueueConfig(
        queue,
        concurrency,
        max_workers=one if knob == "max_workers" else None,
        ordering="fair" if knob == "fair" else "priority",
    )
    tenants = [TagConcurrencyLimit(key="tenant", per_unique_value=True, limit=one)] if knob == "tag" else []
    run_queue = RunQueueConfig(
        max_concurrent_runs=one if knob == "global" else None,
        tag_concurrency_limits=tenants,
        tag_rate_limits=[_tenant_rate(one)] if knob == "tag_rate" else [],
    )
    overrides = (
        {draw(st.sampled_from(["tag:tenant=acme", f"queue:{queue}", GLOBAL])): one} if knob == "override" else {}
    )
    paused = frozenset(draw(st.sets(st.sampled_from(QUEUES), max_size=1)))
    return Rules(run_queue, {queue: config}, overrides, paused)


def _partitions(queue: str, given_rules: Rules) -> list[str]:
    config = given_rules.queues.get(queue)
    partitioned = config is not None and config.concurrency.partition.enabled
    return [p for p in PARTITIONS if (p == "" or p.startswith("key=")) != partitioned or p.startswith("key=")]


@st.composite
def candidates(
    draw: st.DrawFn, given_rules: Rules, queues: Sequence[str], unkeyed: Sequence[str] = (), suspects: bool = True
) -> list[Candidate]:
    found = []
    for n in range(draw(st.integers(min_value=0, max_value=8))):
        queue = draw(st.sampled_from(list(queues))) if queues else None
        if queue is None:
            break
        choices = [p for p in _partitions(queue, given_rules) if not (queue in unkeyed and p.startswith("key="))]
        config = given_rules.queues.get(queue)
        found.append(
            Candidate(
                id=f"r{n}",
                task="t",
                queue=queue,
                partition=draw(st.sampled_from(choices)),
                tags=draw(st.dictionaries(st.just("tenant"), st.sampled_from(TENANTS), max_size=1)),
                priority=draw(st.integers(min_value=0, max_value=2)),
                scheduled_at=float(draw(st.integers(min_value=0, max_value=20))),
                ordering=config.ordering if config is not None else "priority",
                suspect=suspects and draw(st.booleans()),
                group=draw(st.sampled_from(["g1", "g2", None])),
            )
        )
    return found


def usages() -> st.SearchStrategy[dict[str, int]]:
    scopes = [GLOBAL, *(queue_scope(q, p) for q in QUEUES for p in PARTITIONS)]
    scopes += [f"tag:tenant={tenant}" for tenant in TENANTS]
    return st.fixed_dictionaries({scope: st.integers(min_value=0, max_value=3) for scope in scopes})


@st.composite
def locals_(draw: st.DrawFn) -> LocalUsage:
    per_queue = draw(st.dictionaries(st.sampled_from(QUEUES), st.integers(min_value=0, max_value=3)))
    per_partition = {
        (queue, partition): draw(st.integers(min_value=0, max_value=count))
        for queue, count in per_queue.items()
        for partition in draw(st.sets(st.sampled_from(PARTITIONS), max_size=2))
    }
    return LocalUsage(per_queue, per_partition, draw(st.sampled_from([None, "g1"])))


def _ids(decision: object) -> list[str]:
    return [candidate.id for candidate, _ in decision.admitted]  # type: ignore[attr-defined]


worker_queues = st.lists(st.sampled_from(QUEUES), min_size=1, max_size=3, unique=True)


# --- free: the one-statement claim -------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(st.data(), sparse_rules(), worker_queues, usages(), locals_(), st.integers(min_value=0, max_value=5))
def test_a_free_plan_is_a_claim_that_takes_the_first_runs_in_claim_order(
    data: st.DataObject, given_rules: Rules, queues: list[str], usage: dict[str, int], local: LocalUsage, size: int
):
    """`free` (the one-statement claim, postgres/free_claims.py): whatever the usage and this
    worker's counts, `admit` takes the first `size` runs of the open queues in claim order and
    blocks none. (A suspect refuses the statement: SQL hands such a claim back, so none here.)"""
    claim = plan(queues, given_rules)
    assume(claim.free)
    found = data.draw(candidates(given_rules, claim.open_names, suspects=False))
    decision = admit(found, usage, given_rules, local, size)
    assert _ids(decision) == [candidate.id for candidate in claim_order(found)][:size]
    assert decision.blocked == {}


# --- closed: the look, and `more` ------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(st.data(), rules(), worker_queues, usages(), locals_(), st.integers(min_value=1, max_value=5))
def test_a_closed_queue_admits_no_run_read_or_not(
    data: st.DataObject, given_rules: Rules, queues: list[str], usage: dict[str, int], local: LocalUsage, size: int
):
    """`closures` (the look, `peek_cycle`): a queue said closed has no run `admit` would take,
    whatever runs it holds, given what the caller knew (no keyed run, `unkeyed`; no run, `empty`)."""
    claim = plan(queues, given_rules)
    unkeyed = data.draw(st.sets(st.sampled_from(queues)))
    empty = data.draw(st.sets(st.sampled_from(queues)))
    closed = claim.closures(usage, local.per_queue, unkeyed, empty)
    runs = data.draw(candidates(given_rules, [q for q in QUEUES if q not in empty], sorted(unkeyed)))
    decision = admit(runs, usage, given_rules, local, size)
    assert not [candidate.id for candidate, _ in decision.admitted if candidate.queue in closed]
    assert claim.all_closed(usage, local.per_queue, unkeyed, empty) == (set(closed) == set(queues))


@settings(max_examples=200, deadline=None)
@given(st.data(), rules(), worker_queues, usages(), locals_(), st.integers(min_value=1, max_value=5))
def test_nothing_more_means_a_second_claim_at_once_admits_nothing(
    data: st.DataObject, given_rules: Rules, queues: list[str], usage: dict[str, int], local: LocalUsage, size: int
):
    """`nothing_more` (a short claim's `more`, and so the worker's gate): after a claim admitted
    what it did from the runs it read, a claim made at once on the usage that leaves admits
    nothing, of any run of the queues, read before or not; runs taken ahead of the free slots
    (`ahead`) or not."""
    claim = plan(queues, given_rules)
    read = data.draw(candidates(given_rules, claim.open_names))
    ahead = data.draw(st.integers(min_value=0, max_value=4))
    decision = admit(read, usage, given_rules, local, size, ahead=ahead)
    if not claim.nothing_more(usage, local, decision):
        return  # the claim claims again at once: nothing to prove (too many to filter out)
    after, per_queue, per_partition = dict(usage), dict(local.per_queue), dict(local.per_partition)
    for candidate, needs in decision.admitted:
        for need in needs:
            after[need.key] = after.get(need.key, 0) + 1
        per_queue[candidate.queue] = per_queue.get(candidate.queue, 0) + 1
        lane = (candidate.queue, candidate.partition)
        per_partition[lane] = per_partition.get(lane, 0) + 1
    taken = {candidate.id for candidate, _ in decision.admitted}
    rest = [c for c in read if c.id not in taken] + data.draw(candidates(given_rules, queues))
    local_after = LocalUsage(per_queue, per_partition, local.suspect_group)
    again = admit(rest, after, given_rules, local_after, size, ahead=ahead)
    assert again.admitted == []


@settings(max_examples=200, deadline=None)
@given(st.data(), rules(), worker_queues, usages(), locals_())
def test_a_queue_closed_by_a_full_scope_is_blocked_by_that_scope_on_every_surface(
    data: st.DataObject, given_rules: Rules, queues: list[str], usage: dict[str, int], local: LocalUsage
):
    """Block reasons and the plan agree: a queue the plan closes by scope X (used/limit) is, for
    every run the closure covers, blocked by X with the same used/limit in `verdict`, the why of
    every list, count and `queue why`; a queue it closes by its pause is paused there."""
    claim = plan(queues, given_rules)
    unkeyed = data.draw(st.sets(st.sampled_from(queues)))
    closed = claim.closures(usage, local.per_queue, unkeyed)
    for run in data.draw(candidates(given_rules, list(closed), sorted(unkeyed))):
        why = closed[run.queue]
        found = verdict(run.queue, run.partition, run.tags, given_rules, usage)
        if why.cause == PAUSED:
            assert found.paused and found.blocked
        elif why.cause == FULL:
            assert why.checks and set(why.checks) <= set(found.blocking), (why, found)
            assert found.reason() is not None


# --- what the claim reads ----------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(st.data(), rules(), worker_queues, usages(), locals_(), st.integers(min_value=1, max_value=5))
def test_what_the_plan_says_a_claim_need_not_read_does_not_change_the_decision(
    data: st.DataObject, given_rules: Rules, queues: list[str], usage: dict[str, int], local: LocalUsage, size: int
):
    """Without `local_counts` this worker's counts change nothing (only a suspect's group, read
    apart); fair lanes matter only for `fair_lanes`; the scopes locked (`needed_keys`) cover
    every scope an admitted run takes; a queue no limit applies to reads only the claim limit."""
    claim = plan(queues, given_rules)
    runs = data.draw(candidates(given_rules, claim.open_names))
    if not claim.local_counts:
        bare = LocalUsage(suspect_group=local.suspect_group)
        assert _ids(admit(runs, usage, given_rules, local, size)) == _ids(admit(runs, usage, given_rules, bare, size))
    lanes = {(run.queue, run.partition): data.draw(st.integers(min_value=0, max_value=3)) for run in runs}
    if not claim.fair_lanes:
        assert _ids(admit(runs, usage, given_rules, local, size, lanes)) == _ids(
            admit(runs, usage, given_rules, local, size)
        )
    needed = set(claim.needed_keys((run.queue, run.partition, run.tags) for run in runs))
    for _, needs in admit(runs, usage, given_rules, local, size).admitted:
        assert {need.key for need in needs} <= needed
    for queue in claim.open:
        assert queue.window(size) >= size and queue.window(size, margin=False) == size
        if not queue.limited:
            assert queue.window(size) == size


# --- the lock order ---------------------------------------------------------------------------------


def _in_order(taken: list[str], turns: Sequence[str]) -> bool:
    """Whether scope rows taken (waited for) in this sequence keep the global order: key order,
    except a queue's own key whose turn is held (nobody holding it can wait for this claimer)."""
    top: str | None = None
    for key in taken:
        if own_queue(key) is None:
            if top is not None and key < top:
                return False
            top = key
        elif own_queue(key) not in turns and top is not None and key < top:
            return False
    return True


@settings(max_examples=200, deadline=None)
@given(st.data(), rules(), rules(), worker_queues)
def test_a_claim_takes_its_locks_in_the_documented_global_order(
    data: st.DataObject, first: Rules, second: Rules, queues: list[str]
):
    """Turns in queue-name order before any scope row, then scope rows in key order (a queue's own
    key whose turn is held excepted); a key below a held shared key is only ever tried; turns the
    rules ask for mid-claim are taken only where they keep that order."""
    claim = plan(queues, first)
    turns = claim.take_claim_turns(set(), scopes_locked=False)
    assert turns == sorted(turns or []) == claim.claim_turns
    held = set(turns or [])
    assert all(own_queue(key) in (None, *held) for key in claim.ahead_keys(held))
    keys = [GLOBAL, "tag:tenant=acme", "tag:tenant=globex", *(queue_scope(q, p) for q in QUEUES for p in PARTITIONS)]
    locked: list[str] = []
    ahead = sorted(set(claim.ahead_keys(held)) | set(data.draw(st.lists(st.sampled_from(keys), max_size=3))))
    ahead = [key for key in ahead if own_queue(key) is None or own_queue(key) in held]
    wait, tried = lock_steps(ahead, locked, held)
    assert tried == [] and wait == ahead
    locked += wait
    for _ in range(data.draw(st.integers(min_value=0, max_value=3))):
        wait, tried = lock_steps(data.draw(st.lists(st.sampled_from(keys), max_size=4)), locked, held)
        assert not set(wait) & set(tried) and not (set(wait) | set(tried)) & set(locked)
        locked += wait
        assert _in_order(locked, sorted(held)), locked
        top = max((key for key in locked if own_queue(key) is None), default=None)
        assert all(top is not None and key < top and own_queue(key) not in held for key in tried)
    moved = plan(queues, second).take_claim_turns(held, scopes_locked=bool(locked))
    if moved:  # turns still to take after the rules moved: never after a scope row or a greater turn
        assert not locked and min(moved) > max(held, default="") and moved == sorted(moved)


def test_a_paused_queue_is_closed_by_its_pause_and_not_planned():
    paused = Rules(queues={"a": QueueConfig("a", Concurrency(global_limit=1))}, paused=frozenset({"a"}))
    claim: ClaimPlan = plan(["a", "b"], paused)
    assert claim.open_names == ["b"] and claim.free and claim.claim_turns == []
    assert claim.closures({}, {}) == {"a": claim.closures({}, {})["a"]} and claim.closures({}, {})["a"].cause == PAUSED


def test_a_plan_is_made_again_for_other_rules_or_other_queues() -> None:
    """`plan` gives its last plan again only for the same rules object and queues (its mutations:
    ignoring either would hand a claim the plan of rules or queues it was not asked about)."""
    rules = Rules(queues={"a": QueueConfig("a"), "b": QueueConfig("b")})
    first = plan(["a"], rules)
    assert plan(("a",), rules) is first
    paused = Rules(queues=rules.queues, paused=frozenset({"a"}))
    assert plan(["a"], paused).open == ()
    assert [queue.name for queue in plan(["a", "b"], rules).open] == ["a", "b"]
    assert plan(["a"], rules).open_names == ["a"]
