"""Runs through the Store port: enqueue, read back, count, cancel, the drain count.

Same expectations on both adapters; every call goes to the port itself.
"""

from __future__ import annotations

import pytest

from tidegate import AdmissionRejected, RunNotFound, RunQueueConfig, RunStatus
from tidegate.domain.limits import QueueConfig
from tidegate.domain.model import CycleRequest

from .conftest import QUEUE, claim, completed, enqueue_one, new_run, start


def types(store, run_id: str) -> list[str]:
    return [event.type for event in store.run_events(run_id)]


def test_enqueue_stores_each_run_queued_with_what_was_submitted_and_a_run_queued_event(store):
    first = new_run(args={"n": 1, "nested": {"k": [1, "two", None]}}, priority=5, tags={"tenant": "a"}, max_attempts=3)
    second = new_run(concurrency_key="key-1", retry_backoff=2.5, timeout=9.0)
    store.enqueue([first, second])

    record = store.get_run(first.id)
    assert (record.id, record.task, record.queue, record.status) == (first.id, "t.contract", QUEUE, RunStatus.QUEUED)
    assert (record.args, record.priority, record.tags) == (
        {"n": 1, "nested": {"k": [1, "two", None]}},
        5,
        {"tenant": "a"},
    )
    assert (record.attempt, record.max_attempts, record.worker_id) == (0, 3, None)
    assert (record.started_at, record.finished_at) == (None, None)
    assert (record.cancel_requested, record.result, record.error, record.suspect) == (False, None, None, False)
    assert store.get_run(second.id).concurrency_key == "key-1"
    assert types(store, first.id) == ["RunQueued"] and types(store, second.id) == ["RunQueued"]
    assert store.run_events(first.id)[0].metadata == {"queue": QUEUE}


def test_a_delayed_run_is_scheduled_after_its_submission_and_not_claimed_before_it_is_due(store):
    run_id = enqueue_one(store, delay=3600)
    record = store.get_run(run_id)
    assert 3599 <= (record.scheduled_at - record.submitted_at).total_seconds() <= 3601
    assert claim(store) == []
    assert store.get_run(run_id).status is RunStatus.QUEUED


def test_enqueue_past_a_ceiling_raises_and_stores_nothing_of_the_batch(store):
    store.register_limits(RunQueueConfig(max_active=2), [QueueConfig(QUEUE)], [])
    enqueue_one(store)
    batch = [new_run(), new_run()]
    with pytest.raises(AdmissionRejected):
        store.enqueue(batch)
    assert [store.get_run(run.id) for run in batch] == [None, None]
    assert store.status_counts()[RunStatus.QUEUED] == 1


def test_get_run_of_an_unknown_id_is_none_and_its_events_are_empty(store):
    assert store.get_run("no-such-run") is None
    assert store.run_events("no-such-run") == []


def test_page_runs_filters_by_status_and_queue_and_honours_the_limit(store):
    queued = [enqueue_one(store) for _ in range(3)]
    other = enqueue_one(store, "other")
    [running] = claim(store)

    listed = [run.id for run in store.page_runs()]
    assert set(listed) == {*queued, other}
    assert listed == sorted(listed, reverse=True)  # newest first: run ids (ULIDs) sort by time
    assert {run.id for run in store.page_runs(status=RunStatus.QUEUED)} == ({*queued, other} - {running.id})
    assert [run.id for run in store.page_runs(status=RunStatus.RUNNING)] == [running.id]
    assert [run.id for run in store.page_runs(queue="other")] == [other]
    assert len(store.page_runs(limit=2)) == 2


def test_status_counts_has_every_status_and_counts_per_queue(store):
    for _ in range(2):
        enqueue_one(store)
    enqueue_one(store, "other")
    claim(store)
    counts = store.status_counts()
    assert set(counts) == set(RunStatus)
    assert (counts[RunStatus.QUEUED], counts[RunStatus.RUNNING], counts[RunStatus.COMPLETED]) == (2, 1, 0)
    assert store.status_counts(QUEUE)[RunStatus.QUEUED] == 1
    assert store.status_counts("empty") == dict.fromkeys(RunStatus, 0)


def test_cancel_run_cancels_a_queued_run_at_once_with_an_event(store):
    run_id = enqueue_one(store)
    assert store.cancel_run(run_id) is RunStatus.CANCELED
    record = store.get_run(run_id)
    assert record.status is RunStatus.CANCELED and record.finished_at is not None
    assert types(store, run_id) == ["RunQueued", "RunCanceled"]
    assert claim(store) == []
    assert store.cancel_run(run_id) is RunStatus.CANCELED  # again: nothing more happens
    assert types(store, run_id) == ["RunQueued", "RunCanceled"]


def test_cancel_run_of_a_running_run_asks_its_worker_and_leaves_it_running(store):
    run_id = enqueue_one(store)
    [run] = claim(store, "w1")
    start(store, "w1", [run.fence])

    assert store.cancel_run(run_id) is RunStatus.RUNNING
    record = store.get_run(run_id)
    assert record.status is RunStatus.RUNNING and record.cancel_requested
    result = store.cycle(CycleRequest("w1", [QUEUE], [], [], 0, 30))
    assert [tuple(fence) for fence in result.cancel_requested] == [run.fence]


def test_cancel_run_of_a_finished_run_changes_nothing(store):
    run_id = enqueue_one(store)
    [run] = claim(store, "w1")
    store.cycle(CycleRequest("w1", [QUEUE], [run.fence], [completed(run.fence, 7)], 0, 30))
    assert store.cancel_run(run_id) is RunStatus.COMPLETED
    assert store.get_run(run_id).result == 7
    assert "RunCanceled" not in types(store, run_id)


def test_cancel_run_of_an_unknown_run_raises(store):
    with pytest.raises(RunNotFound):
        store.cancel_run("no-such-run")


def test_pending_count_counts_queued_and_running_runs_of_the_given_queues(store):
    assert store.pending_count([QUEUE]) == 0
    for _ in range(3):
        enqueue_one(store)
    enqueue_one(store, "other")
    [run] = claim(store, "w1")
    assert store.pending_count([QUEUE]) == 3
    assert store.pending_count([QUEUE, "other"]) == 4
    assert store.pending_count(["empty"]) == 0

    store.cycle(CycleRequest("w1", [QUEUE], [run.fence], [completed(run.fence)], 0, 30))
    canceled = store.list_queued(QUEUE)[0].id
    store.cancel_run(canceled)
    assert store.pending_count([QUEUE]) == 1
