"""The operators' verbs through the Store port: retry a run, list the workers, count recent ends.

`retry_run` gives a failed or canceled run a new attempt and refuses every
other status without changing anything; `list_workers` is the registry with
busy counts and heartbeat ages on the store's clock; `finished_count` is the
rate `queue why` estimates its ETA from. Same expectations on both adapters.
"""

from __future__ import annotations

import time

import pytest

from tidegate import AdmissionRejected, RunNotFound, RunNotRetryable
from tidegate.domain.backpressure import Pace, retry_after
from tidegate.domain.limits import QueueConfig, RunQueueConfig
from tidegate.domain.model import CycleRequest, RunStatus, WorkerRegistration

from .conftest import QUEUE, claim, completed, enqueue_one, failed, start

TTL = 60.0


def types(store, run_id: str) -> list[str]:
    return [event.type for event in store.run_events(run_id)]


def _fail(store, run_id: str, worker: str = "w1") -> None:
    [claimed] = [run for run in claim(store, worker) if run.id == run_id]
    start(store, worker, [claimed.fence])
    store.cycle(CycleRequest(worker, [QUEUE], [], [failed(claimed.fence)], 0, TTL))


def test_a_failed_run_retried_is_queued_with_one_more_attempt_and_runs_again(store):
    run_id = enqueue_one(store, max_attempts=1, deadline=30.0)
    _fail(store, run_id)
    assert store.get_run(run_id).status is RunStatus.FAILED

    retried = store.retry_run(run_id)
    assert (retried.status, retried.attempt, retried.max_attempts) == (RunStatus.QUEUED, 1, 2)
    assert (retried.error, retried.finished_at, retried.worker_id) == (None, None, None)
    assert types(store, run_id)[-1] == "RunRetriedManually"
    assert store.run_events(run_id)[-1].metadata == {"from": "failed", "attempt": 1, "max_attempts": 2}
    [again] = claim(store, "w2")
    assert (again.id, again.attempt) == (run_id, 2)


def test_a_canceled_run_can_be_retried(store):
    run_id = enqueue_one(store)
    store.cancel_run(run_id)
    assert store.retry_run(run_id).status is RunStatus.QUEUED
    assert store.queue_position(run_id) == (1, 1)


@pytest.mark.parametrize("state", ["queued", "running", "completed"])
def test_retry_refuses_any_other_status_and_changes_nothing(store, state):
    run_id = enqueue_one(store)
    if state != "queued":
        [claimed] = claim(store)
        if state == "completed":
            store.cycle(CycleRequest("w1", [QUEUE], [], [completed(claimed.fence)], 0, TTL))
    before, events = store.get_run(run_id), types(store, run_id)
    with pytest.raises(RunNotRetryable, match=state):
        store.retry_run(run_id)
    assert store.get_run(run_id) == before
    assert types(store, run_id) == events


@pytest.mark.parametrize("ceiling", ["queue", "all queues"])
def test_retry_obeys_the_admission_ceiling_like_a_submit_and_changes_nothing_past_it(store, ceiling):
    """A retried run is active again: past max_active it raises the submit's error, with its hint."""
    if ceiling == "queue":
        store.register_limits(None, [QueueConfig(QUEUE, max_active=2)], [])
    else:
        store.register_limits(RunQueueConfig(max_active=2), [QueueConfig(QUEUE)], [])
    canceled = enqueue_one(store)
    store.cancel_run(canceled)
    enqueue_one(store)
    other = enqueue_one(store)  # two active: the ceiling is reached
    before, events = store.get_run(canceled), types(store, canceled)
    with pytest.raises(AdmissionRejected) as refused:
        store.retry_run(canceled)
    assert (refused.value.active, refused.value.limit) == (2, 2)
    assert refused.value.scope == ("queue " + QUEUE if ceiling == "queue" else "all queues")
    assert refused.value.retry_after == retry_after(2, 2, 1, Pace())  # nothing ran: no duration is known
    assert store.get_run(canceled) == before and types(store, canceled) == events

    store.cancel_run(other)  # room for one
    assert store.retry_run(canceled).status is RunStatus.QUEUED
    with pytest.raises(AdmissionRejected):
        store.retry_run(other)


def test_retry_of_an_unknown_run_raises(store):
    with pytest.raises(RunNotFound):
        store.retry_run("no-such-run")


def test_list_workers_shows_capacity_busy_queues_and_heartbeat_age(store):
    registered = time.monotonic()
    store.register_worker(WorkerRegistration("a", 2, [QUEUE, "other"], False, TTL))
    store.register_worker(WorkerRegistration("b", 3, ["other"], True, TTL))
    enqueue_one(store)
    claim(store, "a")
    workers = {worker.id: worker for worker in store.list_workers()}
    assert [(w.rank, w.capacity, w.busy, w.queues, w.live) for w in workers.values()] == [
        (0, 2, 1, sorted([QUEUE, "other"]), True),
        (1, 3, 0, ["other"], True),
    ]
    assert workers["b"].fill_order and not workers["a"].fill_order
    assert 0 <= workers["a"].heartbeat_age <= time.monotonic() - registered + 0.5  # however slow the machine


@pytest.mark.advances_clock
def test_a_lapsed_worker_is_listed_not_live_with_its_heartbeat_age(store, clock):
    registered = time.monotonic()
    store.register_worker(WorkerRegistration("a", 1, [QUEUE], False, 10))
    clock.advance(30)
    [worker] = store.list_workers()
    assert not worker.live
    assert 29.5 <= worker.heartbeat_age <= 30 + time.monotonic() - registered + 0.5  # the advance, and the time taken


@pytest.mark.advances_clock
def test_finished_count_counts_runs_that_ran_and_ended_within_the_window_by_filter(store, clock):
    done = enqueue_one(store, partition="p1", tags={"tenant": "acme"})
    other = enqueue_one(store, "other")
    enqueue_one(store)  # still queued: not counted
    canceled = enqueue_one(store, partition="p1")
    store.cancel_run(canceled)  # canceled while queued: it never held a slot
    [claimed] = claim(store)
    assert claimed.id == done
    store.cycle(CycleRequest("w1", [QUEUE], [], [completed(claimed.fence)], 0, TTL))
    [elsewhere] = claim(store, "w2", queues=["other"])
    assert elsewhere.id == other
    store.cycle(CycleRequest("w2", ["other"], [], [failed(elsewhere.fence)], 0, TTL))

    assert store.finished_count(60) == 2
    assert store.finished_count(60, queue=QUEUE) == 1
    assert store.finished_count(60, queue=QUEUE, partition="p1") == 1
    assert store.finished_count(60, queue=QUEUE, partition="p2") == 0
    assert store.finished_count(60, tags={"tenant": "acme"}) == 1
    assert store.finished_count(60, tags={"tenant": "globex"}) == 0
    clock.advance(61)
    assert store.finished_count(60) == 0


@pytest.mark.advances_clock
def test_run_pace_reads_how_long_a_scope_s_runs_take_ended_in_flight_and_before(store, clock):
    """Durations on the store's clock: ends within the window, the runs in flight so far, and the
    history before the window; a run that never started (canceled while queued) says nothing."""
    assert store.run_pace(60, queue=QUEUE) == Pace()
    old = enqueue_one(store, partition="p1")
    [first] = claim(store)
    assert first.id == old
    start(store, "w1", [first.fence])
    clock.advance(4)
    store.cycle(CycleRequest("w1", [QUEUE], [], [completed(first.fence)], 0, TTL))  # ran 4 s
    clock.advance(100)  # now history, before the window
    recent = enqueue_one(store, partition="p1", tags={"tenant": "acme"})
    canceled = enqueue_one(store, partition="p2")
    store.cancel_run(canceled)
    flight = enqueue_one(store, partition="p2")
    [second, third] = claim(store, limit=2)
    assert (second.id, third.id) == (recent, flight)
    start(store, "w1", [second.fence, third.fence])
    clock.advance(1)
    store.cycle(CycleRequest("w1", [QUEUE], [], [completed(second.fence)], 0, TTL))  # ran 1 s
    clock.advance(2)  # the third has run 3 s so far

    pace = store.run_pace(60, queue=QUEUE)
    assert (pace.ended, pace.running) == (1, 1)
    assert pace.ended_seconds == pytest.approx(1, abs=0.5)
    assert pace.running_seconds == pytest.approx(3, abs=0.5)
    assert pace.earlier_seconds == pytest.approx(4, abs=0.5)
    assert store.run_pace(60, queue=QUEUE, partition="p2").ended == 0
    assert store.run_pace(60, queue=QUEUE, partition="p2").running == 1
    assert store.run_pace(60, tags={"tenant": "acme"}).ended == 1
    assert store.run_pace(60, tags={"tenant": "acme"}).earlier_seconds is None
    assert store.run_pace(60, queue="other") == Pace()
