"""Dispatch deadline: a run still queued that long after submission fails `capacity: ...`.

Queue-level (`app.queue(..., dispatch_deadline=)`) and task-level
(`app.task(dispatch_deadline=)`, which wins). Counted from submission and
never reset, not even when the sweeper re-queues a run; a run claimed in
time is not affected however long it then runs.
"""

from __future__ import annotations

import threading

import pytest

from tidegate import RunFailed, RunStatus
from tidegate.domain.model import CycleRequest

from .conftest import event_types, execute_sql, wait_until


def _deadline_at(database_url, run_id):
    return execute_sql(database_url, "SELECT deadline_at FROM tidegate_runs WHERE id = ?", (run_id,))[0][0]


def _sweep(store, name="sweeper-test"):
    report = store.sweep(name, 1.0)
    assert report is not None, "the sweeper lock was not free"
    return report


def _expect_capacity_failure(app, handle):
    record = handle.info()
    assert record.status is RunStatus.FAILED, record.status
    assert record.error.startswith("capacity:"), record.error
    assert record.attempt == 0 and record.started_at is None and record.finished_at is not None
    with pytest.raises(RunFailed, match="capacity:"):
        handle.wait(timeout=1)
    assert event_types(app, handle.id)[-1] == "RunFailed"


@pytest.mark.parametrize("level", ["queue", "task"])
def test_a_run_queued_past_its_deadline_fails_at_the_next_sweep(app, level):
    if level == "queue":
        app.queue("late", dispatch_deadline="1s")
        task_options = {}
    else:
        app.queue("late")
        task_options = {"dispatch_deadline": "1s"}

    @app.task(name="late.job", queue="late", **task_options)
    def job() -> str:
        return "ran"

    handle = job.submit()
    report = _sweep(app.store)
    assert handle.id not in report.failed and handle.status() is RunStatus.QUEUED  # not yet due to fail
    app.clock.advance(1.1)
    # past the deadline nobody may claim it any more, even before the sweep fails it
    assert app.store.cycle(CycleRequest("late-worker", ["late"], [], [], 5, 30)).claimed == []
    report = _sweep(app.store)
    assert report.failed == [handle.id]
    _expect_capacity_failure(app, handle)


def test_the_task_deadline_wins_over_the_queue_deadline(app):
    app.queue("mixed", dispatch_deadline="1h")

    @app.task(name="mixed.short", queue="mixed", dispatch_deadline="1s")
    def short() -> None: ...

    @app.task(name="mixed.default", queue="mixed")
    def default() -> None: ...

    quick, patient = short.submit(), default.submit()
    app.clock.advance(1.1)
    report = _sweep(app.store)
    assert report.failed == [quick.id]
    _expect_capacity_failure(app, quick)
    assert patient.status() is RunStatus.QUEUED


def test_a_worker_of_another_queue_fails_it_at_its_boot_sweep(app, start_worker):
    app.queue("unserved", dispatch_deadline="1s")

    @app.task(name="unserved.job", queue="unserved")
    def job() -> None: ...

    @app.task(name="served.job", queue="served")
    def other() -> None: ...

    handle = job.submit()
    app.clock.advance(1.1)
    start_worker(app, queues=["served"], lease_duration="1.5s")  # sweeps at start, then every 0.5s
    wait_until(lambda: handle.status() is RunStatus.FAILED, 30, message="the sweep to fail the late run")
    _expect_capacity_failure(app, handle)


def test_a_run_claimed_before_its_deadline_is_unaffected(app, start_worker):
    app.queue("prompt", dispatch_deadline="1s")
    started, finish = threading.Event(), threading.Event()

    @app.task(name="prompt.slow", queue="prompt")
    def slow() -> str:
        started.set()
        assert finish.wait(30)
        return "done"

    worker = start_worker(app, queues=["prompt"], lease_duration="30s")
    handle = slow.submit()
    assert started.wait(30)
    app.clock.advance(2)  # it now runs well past its dispatch deadline (its lease still holds)
    report = app.store.sweep(worker.id, 1.0)  # the worker's own sweeper lock, taken here: it runs now
    assert report is not None and report.failed == []
    assert handle.status() is RunStatus.RUNNING
    finish.set()
    assert handle.wait(timeout=30) == "done"
    assert handle.status() is RunStatus.COMPLETED and handle.info().error is None
    assert "RunFailed" not in event_types(app, handle.id)


def test_recovery_by_the_sweeper_does_not_reset_the_deadline(app, database_url):
    """Claimed in time by a worker that then died: re-queued, but still due to fail from submission."""
    app.queue("crashy", dispatch_deadline="2s")

    @app.task(name="crashy.job", queue="crashy", max_attempts=5)
    def job() -> None: ...

    handle = job.submit()
    submitted_at = handle.info().submitted_at
    deadline_at = _deadline_at(database_url, handle.id)
    [claimed] = app.store.cycle(CycleRequest("dead-worker", ["crashy"], [], [], 1, 0.3)).claimed  # never renewed
    assert claimed.id == handle.id
    app.clock.advance(0.4)
    report = _sweep(app.store)
    assert report.requeued == [handle.id]
    record = handle.info()
    assert record.status is RunStatus.QUEUED and record.attempt == 1
    assert record.submitted_at == submitted_at, "recovery moved submitted_at"
    assert _deadline_at(database_url, handle.id) == deadline_at, "recovery moved the dispatch deadline"

    # 2s after *submission* (not after the re-queue) it fails
    app.clock.advance(max(0.0, submitted_at.timestamp() + 2.05 - app.clock.wall()))
    report = _sweep(app.store)
    assert report.failed == [handle.id]
    record = handle.info()
    assert record.status is RunStatus.FAILED and record.error.startswith("capacity:"), record.error
    assert record.submitted_at == submitted_at
