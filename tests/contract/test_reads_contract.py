"""What operators read through the Store port: the queue in claim order, a run's place, why it waits.

`queue why` (engine/operators/why.py) is built from these reads: the run, its position,
the rules, the usage and the holders of a full scope. Same expectations on
both adapters.
"""

from __future__ import annotations

import pytest

from tidegate import RunNotFound
from tidegate.domain.limits import QueueConfig
from tidegate.domain.pools import pool_needs
from tidegate.domain.steps import SlotRequest
from tidegate.engine.operators.why import explain

from .conftest import QUEUE, claim, enqueue_one


def test_list_queued_is_the_claim_order_per_queue_with_a_limit(store):
    old_low = enqueue_one(store)
    high = enqueue_one(store, priority=5)
    young_low = enqueue_one(store)
    elsewhere = enqueue_one(store, "other", priority=9)
    assert [run.id for run in store.list_queued(QUEUE)] == [high, old_low, young_low]
    assert [run.id for run in store.list_queued(QUEUE, limit=2)] == [high, old_low]
    assert {run.id for run in store.list_queued()} == {high, old_low, young_low, elsewhere}
    claim(store, "w1")
    assert [run.id for run in store.list_queued(QUEUE)] == [old_low, young_low]


def test_queue_position_is_the_place_in_its_queues_claim_order_out_of_the_queued(store):
    old_low = enqueue_one(store)
    high = enqueue_one(store, priority=5)
    young_low = enqueue_one(store)
    enqueue_one(store, "other", priority=9)
    assert store.queue_position(high) == (1, 3)
    assert store.queue_position(old_low) == (2, 3)
    assert store.queue_position(young_low) == (3, 3)
    store.cancel_run(high)
    assert store.queue_position(young_low) == (2, 2)


def test_queue_position_of_an_unknown_run_raises(store):
    with pytest.raises(RunNotFound):
        store.queue_position("no-such-run")


def test_a_skipped_run_records_the_full_scope_as_its_block_reason(store):
    store.register_limits(None, [QueueConfig(QUEUE)], [])
    store.set_limit(f"queue:{QUEUE}", 1)
    holder_id, waiting_id = enqueue_one(store), enqueue_one(store)
    claim(store, "w1")
    assert claim(store, "w2") == []

    [reason] = store.get_run(waiting_id).block_reason
    assert (reason["scope"], reason["used"], reason["limit"]) == (f"queue:{QUEUE}", 1, 1)
    assert "RunBlocked" in [event.type for event in store.run_events(waiting_id)]
    assert store.get_run(holder_id).block_reason is None


def test_why_names_the_position_the_blocking_scope_and_its_holder(store):
    store.set_limit(f"queue:{QUEUE}", 1)
    holder_id, waiting_id = enqueue_one(store), enqueue_one(store)
    claim(store, "w1")

    explanation = explain(store, waiting_id)
    assert (explanation.position, explanation.queued_in_queue) == (1, 1)
    [blocking] = explanation.blocking
    assert (blocking.scope, blocking.used, blocking.limit) == (f"queue:{QUEUE}", 1, 1)
    assert [holder.run_id for holder in explanation.holders[blocking.scope]] == [holder_id]


def test_why_of_a_running_workflow_names_the_full_pool_its_waiting_step_needs_and_the_holder(store):
    store.set_pool_limit("db", 1, 60)
    holder_id, waiting_id = enqueue_one(store), enqueue_one(store)
    claimed = {run.id: run for run in claim(store, "w1", limit=2)}
    holding, waiting = claimed[holder_id], claimed[waiting_id]
    assert store.acquire_slots(holding.fence, "w1", SlotRequest("load", pool_needs({"db": 1}), {})).granted
    assert not store.acquire_slots(waiting.fence, "w1", SlotRequest("load", pool_needs({"db": 1}), {})).granted

    explanation = explain(store, waiting_id)
    [check] = explanation.checks
    assert (check.layer, check.scope, check.used, check.limit, check.ok) == ("pool", "pool:db", 1, 1, False)
    assert [holder.holder for holder in explanation.holders["pool:db"]] == [f"{holder_id}/load"]
    assert explain(store, holder_id).checks == []  # no step of it waits
