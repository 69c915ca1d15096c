"""Why a queued run waits (`domain.blocking`), as pure policy: tied to the claim's decision.

Every list and count shows `verdict`, so it must be exactly what `admit` would
decide for the run now: blocked by the very scopes `admit` names (same used,
same limit) and held by a pause `admit` skips; ready only when `admit` would
take it. `tally` must count what the verdicts of the runs one by one say.
"""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from tidegate.domain.admission import Candidate, LocalUsage, admit
from tidegate.domain.blocking import QueuedShape, paused_text, tally, verdict
from tidegate.domain.limits import Concurrency, Partition, QueueConfig, RunQueueConfig, TagConcurrencyLimit
from tidegate.domain.scopes import GLOBAL, Rules, queue_scope

QUEUES = ("q", "p")
PARTITIONS = ("", "customer_id=1", "customer_id=2")
TENANTS = ("acme", "globex")

limits = st.none() | st.integers(min_value=1, max_value=3)


@st.composite
def rules(draw: st.DrawFn) -> Rules:
    tag = draw(limits)
    tenants = [] if tag is None else [TagConcurrencyLimit(key="tenant", per_unique_value=True, limit=tag)]
    run_queue = RunQueueConfig(max_concurrent_runs=draw(limits), tag_concurrency_limits=tenants)
    queues = {
        "q": QueueConfig("q", Concurrency(global_limit=draw(limits), partition=Partition(by_args=["customer_id"]))),
        "p": QueueConfig("p", Concurrency(global_limit=draw(limits))),
    }
    paused = frozenset(draw(st.sets(st.sampled_from(QUEUES))))
    return Rules(run_queue, queues, {}, paused)


@st.composite
def shapes(draw: st.DrawFn) -> QueuedShape:
    queue = draw(st.sampled_from(QUEUES))
    partition = draw(st.sampled_from(PARTITIONS)) if queue == "q" else ""
    tags = draw(st.dictionaries(st.just("tenant"), st.sampled_from(TENANTS), max_size=1))
    return QueuedShape(queue, partition, tags, draw(st.integers(min_value=1, max_value=5)))


def usages() -> st.SearchStrategy[dict[str, int]]:
    scopes = [GLOBAL, "queue:p", *(queue_scope("q", partition) for partition in PARTITIONS)]
    scopes += [f"tag:tenant={tenant}" for tenant in TENANTS]
    return st.dictionaries(st.sampled_from(scopes), st.integers(min_value=0, max_value=4))


@settings(max_examples=300, deadline=None)
@given(rules(), usages(), shapes())
def test_the_verdict_is_the_claims_decision_on_the_run(given_rules: Rules, usage: dict[str, int], shape: QueuedShape):
    found = verdict(shape.queue, shape.partition, shape.tags, given_rules, usage)
    candidate = Candidate("r1", "t", shape.queue, shape.partition, dict(shape.tags), 0, 0.0)
    decision = admit([candidate], usage, given_rules, LocalUsage(), capacity=1)
    admitted = [admitted.id for admitted, _ in decision.admitted]
    assert found.paused == given_rules.is_paused(shape.queue)
    if found.paused:
        assert admitted == [] and "r1" not in decision.blocked  # the pause holds it; admit skips it
    else:
        named = [(held.scope, held.used, held.limit) for held in decision.blocked.get("r1", ())]
        assert [(check.scope, check.used, check.limit) for check in found.blocking] == named
        assert (admitted == ["r1"]) == (not found.blocked)


@settings(max_examples=200, deadline=None)
@given(rules(), usages(), st.lists(shapes(), max_size=8))
def test_the_tally_counts_what_each_runs_verdict_says(given_rules: Rules, usage: dict[str, int], found: list):
    per_queue: Counter[str] = Counter()
    per_scope: Counter[str] = Counter()
    for shape in found:
        for _ in range(shape.count):  # run by run, as the lists show them
            reason = verdict(shape.queue, shape.partition, shape.tags, given_rules, usage).reason()
            if reason is not None:
                per_queue[shape.queue] += 1
                per_scope.update({held["scope"] for held in reason})
    counted = tally(found, given_rules, usage)
    assert (dict(counted.per_queue), dict(counted.per_scope)) == (dict(per_queue), dict(per_scope))


def test_a_paused_run_names_the_pause_first_then_its_full_scopes():
    paused = Rules(queues={"q": QueueConfig("q", Concurrency(global_limit=1))}, paused=frozenset({"q"}))
    found = verdict("q", "", {}, paused, {"queue:q": 1})
    assert found.reason() == [
        {"scope": "queue:q", "reason": "paused", "detail": paused_text("q")},
        {"scope": "queue:q", "used": 1, "limit": 1},
    ]
    assert tally([QueuedShape("q", "", {}, 3)], paused, {"queue:q": 1}).per_scope == {"queue:q": 3}  # once per run
    assert verdict("q", "", {}, Rules(queues=paused.queues), {"queue:q": 0}).reason() is None  # room: ready
