"""A worker's round trip through the Store port: claims, starts, outcomes, and the hand-back.

Same expectations on both adapters; every interleaving is explicit (worker ids
are made up), nothing waits on timing.
"""

from __future__ import annotations

import time

from tidegate import RunStatus
from tidegate.domain.model import CycleRequest, Outcome, OutcomeKind

from .conftest import QUEUE, claim, completed, enqueue_one, failed, start


def types(store, run_id: str) -> list[str]:
    return [event.type for event in store.run_events(run_id)]


def test_a_claim_takes_priority_first_then_age_across_the_workers_queues(store):
    old_low = enqueue_one(store, "qa")
    high = enqueue_one(store, "qb", priority=9)
    young_low = enqueue_one(store, "qb")
    claimed = store.cycle(CycleRequest("w1", ["qa", "qb"], [], [], 3, 30)).claimed
    assert [run.id for run in claimed] == [high, old_low, young_low]


def test_a_claim_takes_at_most_its_limit_and_leases_each_run_to_the_worker(store):
    ids = [enqueue_one(store, max_attempts=3) for _ in range(3)]
    [run] = claim(store, "w1", limit=1, lease=60)
    assert (run.id, run.attempt, run.max_attempts, run.task, run.queue) == (ids[0], 1, 3, "t.contract", QUEUE)
    record = store.get_run(run.id)
    assert (record.status, record.worker_id, record.attempt) == (RunStatus.RUNNING, "w1", 1)
    assert (record.lease_expires_at - record.scheduled_at).total_seconds() >= 59
    assert types(store, run.id) == ["RunQueued", "RunDequeued"]
    assert [r.id for r in claim(store, "w2", limit=5)] == ids[1:]
    assert claim(store, "w3") == []


def test_a_claim_that_ran_dry_says_when_the_next_run_falls_due(store):
    submitted = time.monotonic()
    enqueue_one(store, delay=600)
    result = store.cycle(CycleRequest("w1", [QUEUE], [], [], 1, 30))
    taken = time.monotonic() - submitted  # however slow the machine
    assert result.claimed == [] and 600 - taken - 0.1 <= result.next_due_in <= 600


def test_a_start_is_recorded_once_with_its_event(store):
    enqueue_one(store)
    [run] = claim(store, "w1")
    start(store, "w1", [run.fence])
    assert store.get_run(run.id).started_at is not None
    assert types(store, run.id) == ["RunQueued", "RunDequeued", "RunStarted"]


def test_a_completed_outcome_stores_the_result_and_finishes_the_run(store):
    enqueue_one(store)
    [run] = claim(store, "w1")
    result = store.cycle(CycleRequest("w1", [QUEUE], [run.fence], [completed(run.fence, {"answer": 42})], 0, 30))
    assert result.fenced_out == []
    record = store.get_run(run.id)
    assert (record.status, record.result, record.error) == (RunStatus.COMPLETED, {"answer": 42}, None)
    assert record.finished_at is not None and types(store, run.id)[-1] == "RunCompleted"


def test_a_failed_outcome_with_a_retry_delay_queues_the_next_attempt(store):
    enqueue_one(store, max_attempts=2)
    [run] = claim(store, "w1")
    store.cycle(CycleRequest("w1", [QUEUE], [run.fence], [failed(run.fence, "flaky", retry_delay=0)], 0, 30))
    record = store.get_run(run.id)
    assert (record.status, record.error) == (RunStatus.QUEUED, "flaky")
    assert types(store, run.id)[-1] == "RunRetried"
    [again] = claim(store, "w2")
    assert (again.id, again.attempt) == (run.id, 2)


def test_a_failed_outcome_without_a_retry_fails_the_run_for_good(store):
    enqueue_one(store, max_attempts=5)
    [run] = claim(store, "w1")
    store.cycle(CycleRequest("w1", [QUEUE], [run.fence], [failed(run.fence, "fatal")], 0, 30))
    record = store.get_run(run.id)
    assert (record.status, record.error) == (RunStatus.FAILED, "fatal")
    assert types(store, run.id)[-1] == "RunFailed"
    assert claim(store, "w2") == []


def test_a_requested_cancel_wins_over_a_retry(store):
    run_id = enqueue_one(store, max_attempts=3)
    [run] = claim(store, "w1")
    store.cancel_run(run_id)
    store.cycle(CycleRequest("w1", [QUEUE], [run.fence], [failed(run.fence, "flaky", retry_delay=0)], 0, 30))
    assert store.get_run(run_id).status is RunStatus.CANCELED


def test_a_canceled_outcome_ends_the_run_canceled(store):
    run_id = enqueue_one(store)
    [run] = claim(store, "w1")
    store.cancel_run(run_id)
    store.cycle(CycleRequest("w1", [QUEUE], [run.fence], [Outcome(run.id, run.attempt, OutcomeKind.CANCELED)], 0, 30))
    assert store.get_run(run_id).status is RunStatus.CANCELED
    assert types(store, run_id)[-1] == "RunCanceled"


def test_an_outcome_of_an_attempt_that_is_not_the_current_one_is_fenced_out(store):
    enqueue_one(store)
    [run] = claim(store, "w1")
    stale = (run.id, run.attempt + 1)
    result = store.cycle(CycleRequest("w1", [QUEUE], [], [completed(stale, "stale")], 0, 30))
    assert [tuple(fence) for fence in result.fenced_out] == [stale]
    assert store.get_run(run.id).status is RunStatus.RUNNING


def test_an_outcome_frees_the_runs_slots_for_the_next_claim(store):
    store.set_limit(f"queue:{QUEUE}", 1)
    first, second = enqueue_one(store), enqueue_one(store)
    [run] = claim(store, "w1", limit=2)
    assert run.id == first and claim(store, "w2") == []
    store.cycle(CycleRequest("w1", [QUEUE], [run.fence], [completed(run.fence)], 0, 30))
    assert [r.id for r in claim(store, "w2")] == [second]


def test_hand_back_requeues_the_workers_attempts_uncounted_and_keeps_their_place(store):
    first, second = enqueue_one(store, max_attempts=1), enqueue_one(store)
    [run] = claim(store, "leaving")
    start(store, "leaving", [run.fence], [QUEUE])

    assert store.hand_back("leaving", [run.fence]) == [first]
    record = store.get_run(first)
    assert (record.status, record.worker_id) == (RunStatus.QUEUED, None)
    requeued = store.run_events(first)[-1]
    assert requeued.type == "RunRequeued"
    assert (requeued.metadata["charged"], requeued.metadata["reason"]) == (False, "worker shutting down")
    [again] = claim(store, "other")
    assert (again.id, again.attempt) == (first, 2)  # the hand-back did not use up the only attempt
    assert store.get_run(second).status is RunStatus.QUEUED


def test_hand_back_of_a_run_whose_cancel_was_asked_ends_it_canceled(store):
    run_id = enqueue_one(store)
    [run] = claim(store, "leaving")
    store.cancel_run(run_id)
    assert store.hand_back("leaving", [run.fence]) == [run_id]
    assert store.get_run(run_id).status is RunStatus.CANCELED
    assert types(store, run_id)[-1] == "RunCanceled"


def test_hand_back_ignores_fences_the_worker_no_longer_holds(store):
    enqueue_one(store)
    [run] = claim(store, "holder")
    assert store.hand_back("someone-else", [run.fence]) == []
    assert store.hand_back("holder", [(run.id, run.attempt + 1)]) == []
    assert store.hand_back("holder", []) == []
    assert store.get_run(run.id).status is RunStatus.RUNNING


def test_a_second_outcome_for_a_finished_attempt_is_fenced_out_and_changes_nothing(store):
    enqueue_one(store)
    [run] = claim(store, "w1")
    assert store.cycle(CycleRequest("w1", [QUEUE], [run.fence], [completed(run.fence, 1)], 0, 30)).fenced_out == []
    again = store.cycle(CycleRequest("w1", [QUEUE], [], [completed(run.fence, 2)], 0, 30))
    assert [tuple(fence) for fence in again.fenced_out] == [run.fence]
    assert store.get_run(run.id).result == 1
    assert types(store, run.id).count("RunCompleted") == 1
