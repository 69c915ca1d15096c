"""Limits through the Store port: declarations, live overrides, usage and holders of scopes.

Same expectations on both adapters; claims are explicit cycles under made-up
worker ids, so every count is exact.
"""

from __future__ import annotations

from tidegate import Concurrency, RunQueueConfig
from tidegate.domain.limits import QueueConfig
from tidegate.domain.model import CycleRequest

from .conftest import QUEUE, claim, completed, enqueue_one

LIMITED = "limited"


def test_declared_limits_are_what_the_rules_read_back(store):
    store.register_limits(
        RunQueueConfig(max_concurrent_runs=8, max_active=100),
        [QueueConfig(LIMITED, Concurrency(global_limit=3), max_active=50)],
        ["implied"],
    )
    rules = store.rules()
    assert (rules.run_queue.max_concurrent_runs, rules.run_queue.max_active) == (8, 100)
    assert rules.global_limit() == 8
    assert rules.queue_limit(LIMITED, "") == 3 and rules.queues[LIMITED].max_active == 50
    assert "implied" in rules.queues and rules.queue_limit("implied", "") is None


def test_declaring_without_a_run_queue_keeps_the_stored_one(store):
    store.register_limits(RunQueueConfig(max_concurrent_runs=8), [], [])
    store.register_limits(None, [QueueConfig("other")], [])
    assert store.rules().global_limit() == 8


def test_a_live_override_wins_over_the_code_and_is_reported_as_a_change(store):
    store.register_limits(None, [QueueConfig(LIMITED, Concurrency(global_limit=4))], [])
    assert store.limit_overrides() == []

    change = store.set_limit(f"queue:{LIMITED}", 1)
    assert (change.target, change.old, change.new, change.version) == (f"queue:{LIMITED}", 4, 1, 1)
    assert store.rules().queue_limit(LIMITED, "") == 1
    [override] = store.limit_overrides()
    assert (override.target, override.limit, override.version) == (f"queue:{LIMITED}", 1, 1)

    again = store.set_limit(f"queue:{LIMITED}", None)  # unlimited, live
    assert (again.old, again.new, again.version) == (1, None, 2)
    assert store.rules().queue_limit(LIMITED, "") is None


def test_a_reset_brings_back_the_codes_limit(store):
    store.register_limits(None, [QueueConfig(LIMITED, Concurrency(global_limit=4))], [])
    store.set_limit(f"queue:{LIMITED}", 1)
    change = store.reset_limit(f"queue:{LIMITED}")
    assert (change.old, change.new) == (1, 4)
    assert store.limit_overrides() == [] and store.rules().queue_limit(LIMITED, "") == 4
    nothing = store.reset_limit("global")  # resetting what was never overridden changes nothing
    assert (nothing.old, nothing.new) == (None, None)


def test_overrides_of_the_global_and_tag_scopes(store):
    store.set_limit("global", 5)
    store.set_limit("tag:tenant", 2)
    store.set_limit("tag:tenant=big", 4)
    assert {override.target: override.limit for override in store.limit_overrides()} == {
        "global": 5,
        "tag:tenant": 2,
        "tag:tenant=big": 4,
    }
    assert store.rules().global_limit() == 5


def test_a_lowered_limit_holds_back_the_next_claim(store):
    for _ in range(3):
        enqueue_one(store, LIMITED)
    store.set_limit(f"queue:{LIMITED}", 2)
    assert len(claim(store, "w1", limit=3, queues=[LIMITED])) == 2
    assert claim(store, "w2", queues=[LIMITED]) == []


def test_scope_usage_and_holders_follow_claims_and_outcomes(store):
    store.register_limits(
        RunQueueConfig(max_concurrent_runs=10), [QueueConfig(LIMITED, Concurrency(global_limit=5))], []
    )
    for _ in range(3):
        enqueue_one(store, LIMITED)
    assert store.scope_usage() == {}
    first, second = claim(store, "w1", limit=2, queues=[LIMITED])
    assert store.scope_usage() == {"global": 2, f"queue:{LIMITED}": 2}
    holders = store.scope_holders(f"queue:{LIMITED}")
    assert sorted((h.run_id, h.attempt, h.worker_id, h.slots) for h in holders) == sorted(
        [(first.id, 1, "w1", 1), (second.id, 1, "w1", 1)]
    )
    assert all(h.scope == f"queue:{LIMITED}" and h.expires_at >= h.claimed_at for h in holders)

    store.cycle(CycleRequest("w1", [LIMITED], [first.fence], [completed(first.fence)], 0, 30))
    assert store.scope_usage() == {"global": 1, f"queue:{LIMITED}": 1}
    assert [h.run_id for h in store.scope_holders("global")] == [second.id]
    assert store.scope_holders("queue:nothing-here") == []


def test_a_partitioned_queue_holds_one_scope_per_partition(store):
    store.register_limits(None, [QueueConfig(QUEUE, Concurrency(global_limit=1))], [])
    enqueue_one(store, QUEUE, partition="a")
    enqueue_one(store, QUEUE, partition="b")
    claim(store, "w1", limit=2)
    assert store.scope_usage() == {f"queue:{QUEUE}/a": 1, f"queue:{QUEUE}/b": 1}
