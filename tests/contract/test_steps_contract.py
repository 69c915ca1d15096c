"""Step checkpoints through the Store port: record, finish and hand on, map items in a window.

Each verb's core promise on both adapters, with explicit fences; the deeper
cases are in pools/test_pools_store.py and pools/test_pools_handoff.py.
"""

from __future__ import annotations

from tidegate.domain.pools import pool_needs
from tidegate.domain.steps import FinishStepRequest, SlotRequest, StepStatus, StepUpdate
from tidegate.storage.port import Fence

from .conftest import claim, enqueue_one


def running_fence(store) -> Fence:
    enqueue_one(store)
    [run] = claim(store, "w1")
    return run.fence


def step_events(store, run_id: str) -> list[str]:
    return [event.type for event in store.run_events(run_id) if event.step_key is not None]


def test_record_step_keeps_a_checkpoint_with_its_events(store):
    fence = running_fence(store)
    assert store.record_steps(fence, [StepUpdate("extract", StepStatus.RUNNING)])
    assert store.record_steps(fence, [StepUpdate("extract", StepStatus.COMPLETED, output={"rows": 2})])
    assert store.record_steps(fence, [StepUpdate("extract", StepStatus.RUNNING)])  # a checkpoint is never overwritten
    [step] = store.run_steps(fence[0])
    assert (step.step_key, step.status, step.output, step.attempt) == ("extract", StepStatus.COMPLETED, {"rows": 2}, 1)
    assert step_events(store, fence[0]) == ["StepStarted", "StepCompleted"]


def test_a_stale_attempt_records_nothing(store):
    run, attempt = running_fence(store)
    assert store.record_steps((run, attempt + 1), [StepUpdate("s", StepStatus.RUNNING)]) is False
    assert store.record_steps((run, attempt + 1), [StepUpdate("s", StepStatus.RUNNING)]) is False
    assert store.run_steps(run) == []


def test_record_steps_records_many_in_order_and_run_steps_reads_them_back(store):
    fence = running_fence(store)
    items = [StepUpdate(f"m[{i}]", StepStatus.PENDING, "m", i) for i in range(3)]
    assert store.record_steps(fence, items)
    steps = store.run_steps(fence[0])
    assert [(s.step_key, s.map_key, s.item_index, s.status) for s in steps] == [
        (f"m[{i}]", "m", i, StepStatus.PENDING) for i in range(3)
    ]
    assert step_events(store, fence[0]) == []  # pending items are recorded silently


def test_next_map_item_takes_items_in_index_order_within_the_window(store):
    fence = running_fence(store)
    store.record_steps(fence, [StepUpdate(f"m[{i}]", StepStatus.PENDING, "m", i) for i in range(3)])
    first = store.next_map_item(fence, "w1", "m", 2)
    second = store.next_map_item(fence, "w1", "m", 2)
    assert (first.step_key, first.status, second.step_key) == ("m[0]", StepStatus.RUNNING, "m[1]")
    assert store.next_map_item(fence, "w1", "m", 2) is None  # the window is full
    store.record_steps(fence, [StepUpdate("m[0]", StepStatus.COMPLETED, "m", 0, output=0)])
    assert store.next_map_item(fence, "w1", "m", 2).step_key == "m[2]"
    assert store.next_map_item((fence[0], fence[1] + 1), "w1", "m", 5) is None  # fenced out


def test_finish_step_records_the_step_and_hands_its_slots_to_the_runs_next_waiter(store):
    store.set_pool_limit("db", 1, 300)
    fence = running_fence(store)
    assert store.acquire_slots(fence, "w1", SlotRequest("a", pool_needs({"db": 1}), {})).granted
    assert not store.acquire_slots(fence, "w1", SlotRequest("b", pool_needs({"db": 1}), {})).granted

    finish = store.finish_step(
        FinishStepRequest(
            fence, "w1", StepUpdate("a", StepStatus.COMPLETED, output="a"), SlotRequest("b", pool_needs({"db": 1}))
        )
    )
    assert finish.recorded and finish.handed is not None and finish.handed.granted and not finish.shared
    assert [holder.step_key for holder in store.pool_holders("db")] == ["b"]
    assert {s.step_key: s.status for s in store.run_steps(fence[0])}["a"] is StepStatus.COMPLETED


def test_finish_step_without_a_successor_frees_its_slots(store):
    store.set_pool_limit("db", 1, 300)
    fence = running_fence(store)
    store.acquire_slots(fence, "w1", SlotRequest("a", pool_needs({"db": 1}), {}))
    finish = store.finish_step(FinishStepRequest(fence, "w1", StepUpdate("a", StepStatus.COMPLETED, output=1)))
    assert finish.recorded and finish.handed is None
    assert store.pool_holders("db") == []


def test_finish_step_of_a_stale_attempt_records_nothing(store):
    run, attempt = running_fence(store)
    finish = store.finish_step(
        FinishStepRequest((run, attempt + 1), "w1", StepUpdate("a", StepStatus.COMPLETED, output=1))
    )
    assert not finish.recorded and store.run_steps(run) == []
