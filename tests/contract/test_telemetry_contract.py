"""The reads behind the event stream and `/metrics`, and the queue wait a claim reports.

The stream resumes from the last event id a client saw, so `events_after`
must return every later event, oldest first, and nothing at or before the
id; `queued_shapes` groups the queued runs by what decides their scopes (the
counts of blocked runs classify each group: domain/blocking.py), and forgets a
run once it is claimed; `run_counts` is per
(queue, status); a claimed run's `queued_seconds` is how long it had been due,
on the store's clock. Same on both adapters.
"""

from __future__ import annotations

import time

import pytest

from tidegate.domain.limits import QueueConfig
from tidegate.domain.model import CycleRequest, RunStatus

from .conftest import QUEUE, claim, completed, enqueue_one


def test_events_after_returns_every_later_event_oldest_first_up_to_the_limit(store):
    assert store.last_event_id() == 0
    first = enqueue_one(store)
    everything = store.events_after(0, 100)
    assert store.last_event_id() == everything[-1].id
    assert [event.type for event in everything] == ["RunQueued"]
    assert everything[0].run_id == first

    (claimed,) = claim(store)
    store.cycle(CycleRequest("w1", [QUEUE], [claimed.fence], [completed(claimed.fence)], 0, 30.0))
    later = store.events_after(everything[-1].id, 100)
    assert [event.type for event in later][-1] == "RunCompleted"
    assert "RunDequeued" in [event.type for event in later]
    assert all(event.id > everything[-1].id for event in later)
    assert [event.id for event in later] == sorted(event.id for event in later)

    assert [event.id for event in store.events_after(0, 2)] == [event.id for event in (everything + later)[:2]]
    assert store.events_after(later[-1].id, 100) == []
    assert store.last_event_id() == later[-1].id


def test_queued_shapes_group_queued_runs_by_queue_partition_and_tags(store):
    """The read behind every count of blocked runs: one row per shape, whatever claims read."""
    store.register_limits(None, [QueueConfig(QUEUE)], [])
    assert store.queued_shapes() == []
    enqueue_one(store)
    enqueue_one(store)
    enqueue_one(store)
    enqueue_one(store, partition="customer_id=3", tags={"tenant": "acme"})
    enqueue_one(store, partition="customer_id=3", tags={"tenant": "acme"})
    enqueue_one(store, "other", tags={"tenant": "acme"})
    enqueue_one(store, delay=60.0)  # not yet due: queued all the same
    claim(store, "w1")  # the first run runs: no longer queued
    shapes = {(shape.queue, shape.partition, tuple(sorted(shape.tags.items()))): shape.count
              for shape in store.queued_shapes()}  # fmt: skip
    acme = (("tenant", "acme"),)
    assert shapes == {(QUEUE, "", ()): 3, (QUEUE, "customer_id=3", acme): 2, ("other", "", acme): 1}


def test_run_counts_are_per_queue_and_status(store):
    assert store.run_counts() == {}
    enqueue_one(store)
    enqueue_one(store)
    enqueue_one(store, "other")
    (claimed,) = claim(store)
    assert store.run_counts() == {
        (QUEUE, RunStatus.QUEUED): 1,
        (QUEUE, RunStatus.RUNNING): 1,
        ("other", RunStatus.QUEUED): 1,
    }
    store.cycle(CycleRequest("w1", [QUEUE], [claimed.fence], [completed(claimed.fence)], 0, 30.0))
    assert store.run_counts()[(QUEUE, RunStatus.COMPLETED)] == 1


@pytest.mark.advances_clock
def test_a_claimed_run_carries_how_long_it_waited_due_on_the_stores_clock(store, clock):
    began = time.monotonic()
    enqueue_one(store)
    enqueue_one(store, delay=10.0)
    clock.advance(4.0)
    (waited,) = claim(store)
    taken = time.monotonic() - began  # real time on top of the advances, however slow the machine
    assert 4.0 <= waited.queued_seconds <= 4.0 + taken + 0.5
    clock.advance(10.0)
    (due_later,) = claim(store)
    taken = time.monotonic() - began
    assert 3.5 <= due_later.queued_seconds <= 4.0 + taken + 0.5  # from when it fell due (14 from its submit)


def test_latest_events_of_a_type_are_newest_first_and_only_that_type(store):
    store.register_limits(None, [QueueConfig(QUEUE)], [])
    assert store.latest_events("LimitChanged", 10) == []
    enqueue_one(store)
    store.set_limit(f"queue:{QUEUE}", 2)
    store.set_pool_limit("db", 3, 30.0)
    store.set_queue_paused(QUEUE, True)
    store.reset_limit(f"queue:{QUEUE}")
    history = store.latest_events("LimitChanged", 10)
    assert {event.type for event in history} == {"LimitChanged"}
    assert [event.metadata["target"] for event in history] == [
        f"queue:{QUEUE}",
        f"queue:{QUEUE}",
        "pool:db",
        f"queue:{QUEUE}",
    ]
    assert history[-1].metadata["new"] == 2 and history[0].metadata["reset"] is True
    assert [event.id for event in history] == sorted((event.id for event in history), reverse=True)
    assert [event.id for event in store.latest_events("LimitChanged", 2)] == [event.id for event in history[:2]]
    (queued,) = store.latest_events("RunQueued", 10)
    assert queued.run_id is not None and store.latest_events("CapacityOverflow", 10) == []
