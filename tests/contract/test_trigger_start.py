"""A trigger records its attempt's start when no turn did yet: exactly once, before its own events.

A worker reports an attempt's start with its next turn, but the attempt's code
runs meanwhile and may trigger a child, and a wait ends the attempt at once:
the start reported after it matched no running attempt and was dropped, so the
run's story (`runs show`, the dashboard's Events tab, intervals replayed from
events) lacked the attempt. The trigger's transaction now records the start
first (`started_at` still unset is what says no turn did), and a start
reported later adds nothing.
"""

from __future__ import annotations

from tidegate.domain.children import NewChild, TriggerRequest
from tidegate.domain.model import CycleRequest
from tidegate.storage.port import Store

from .conftest import QUEUE, claim, completed, enqueue_one, new_run, start

WORKER = "w1"


def _child(index: int = 0, awaited: bool = True) -> NewChild:
    return NewChild(new_run("kids", task="t.child", args={"i": index}), index, awaited)


def _story(store: Store, run_id: str) -> list[tuple[str, int | None]]:
    """The attempt's events (its claim's left out), each with the attempt it names (if any)."""
    told = ("RunStarted", "ChildTriggered", "RunWaiting", "RunCompleted")
    return [(event.type, event.metadata.get("attempt")) for event in store.run_events(run_id) if event.type in told]


def test_a_wait_before_the_turn_records_the_start_first_and_the_late_start_adds_nothing(store):
    enqueue_one(store)
    (parent,) = claim(store, WORKER)
    assert store.trigger_children(TriggerRequest(parent.fence, WORKER, [_child()], True, False)).waiting
    start(store, WORKER, [parent.fence])  # the worker's turn, after the wait ended the attempt

    assert _story(store, parent.id) == [("RunStarted", 1), ("ChildTriggered", None), ("RunWaiting", 1)]
    (event,) = [event for event in store.run_events(parent.id) if event.type == "RunStarted"]
    assert event.metadata == {"attempt": 1, "worker": WORKER}
    assert store.get_run(parent.id).started_at is not None


def test_a_fire_and_forget_trigger_before_the_turn_records_the_start_once(store):
    enqueue_one(store)
    (parent,) = claim(store, WORKER)
    store.trigger_children(TriggerRequest(parent.fence, WORKER, [_child(awaited=False)], False, False))
    started_at = store.get_run(parent.id).started_at
    # The turn brings the start and the outcome together, as a short attempt's does.
    result = store.cycle(CycleRequest(WORKER, [QUEUE], [parent.fence], [completed(parent.fence, 1)], 0, 30.0))

    assert result.fenced_out == []
    assert _story(store, parent.id) == [("RunStarted", 1), ("ChildTriggered", None), ("RunCompleted", 1)]
    assert started_at is not None and store.get_run(parent.id).started_at == started_at  # not moved by the turn


def test_a_start_the_turn_recorded_first_is_not_recorded_again_by_the_trigger(store):
    enqueue_one(store)
    (parent,) = claim(store, WORKER)
    start(store, WORKER, [parent.fence])
    store.trigger_children(TriggerRequest(parent.fence, WORKER, [_child()], True, False))

    assert _story(store, parent.id) == [("RunStarted", 1), ("ChildTriggered", None), ("RunWaiting", 1)]
