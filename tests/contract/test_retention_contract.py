"""Retention through the Store port: `prune_runs` deletes only finished runs past the age.

A finished run (completed, failed, canceled) that ended more than `older_than`
seconds ago (the store's clock) goes with its events, its step rows and old
fired ticks, at most `limit` per call. A queued or running run is never touched
however old, nor are its events, nor events that belong to no run.
"""

from __future__ import annotations

from datetime import timedelta

from tidegate.domain.model import CycleRequest, RunStatus
from tidegate.domain.schedules import Firing, NewSchedule, ScheduleDefinition, Tick
from tidegate.domain.steps import StepStatus, StepUpdate

from .conftest import QUEUE, claim, completed, enqueue_one, execute_sql, failed, new_run, start

DAY = 86400.0
WEEK = 7 * DAY


def finish(store, status: str) -> str:
    """A run taken to `status`, with a step row when it ran."""
    run_id = enqueue_one(store)
    if status == "canceled":
        store.cancel_run(run_id)
        return run_id
    [claimed] = [run for run in claim(store, limit=10) if run.id == run_id]
    start(store, "w1", [claimed.fence])
    assert store.record_steps(claimed.fence, [StepUpdate("s", StepStatus.COMPLETED, output=1)])
    outcome = completed(claimed.fence) if status == "completed" else failed(claimed.fence)
    store.cycle(CycleRequest("w1", [QUEUE], [], [outcome], 0, 30.0))
    assert store.get_run(run_id).status.value == status
    return run_id


def count(store, table: str, run_id: str) -> int:
    return execute_sql(store.url, f"SELECT count(*) FROM {table} WHERE run_id = ?", (run_id,))[0][0]


def test_old_finished_runs_go_with_their_events_and_steps_and_nothing_else_does(store, clock):
    old = [finish(store, status) for status in ("completed", "failed", "canceled")]
    queued = enqueue_one(store, "elsewhere")  # a queue no claim here serves: it stays queued
    running = enqueue_one(store)
    [claimed] = [run for run in claim(store, limit=10) if run.id == running]
    start(store, "w1", [claimed.fence])
    assert store.record_steps(claimed.fence, [StepUpdate("s", StepStatus.RUNNING)])
    store.set_limit("global", 5)  # an event of no run
    clock.advance(WEEK + 60)
    recent = finish(store, "completed")
    events_of = {run_id: count(store, "tidegate_events", run_id) for run_id in (queued, running, recent)}
    old_events = sum(count(store, "tidegate_events", run_id) for run_id in old)

    report = store.prune_runs(WEEK, 100)

    assert (report.runs, report.steps) == (3, 2)
    assert report.events == old_events > 0
    for run_id in old:
        assert store.get_run(run_id) is None
        assert count(store, "tidegate_events", run_id) == count(store, "tidegate_steps", run_id) == 0
    assert store.get_run(queued).status is RunStatus.QUEUED
    assert store.get_run(running).status is RunStatus.RUNNING
    assert store.get_run(recent).status is RunStatus.COMPLETED
    assert {run_id: count(store, "tidegate_events", run_id) for run_id in events_of} == events_of
    assert count(store, "tidegate_steps", running) == 1
    assert execute_sql(store.url, "SELECT count(*) FROM tidegate_events WHERE run_id IS NULL")[0][0] >= 1
    assert store.prune_runs(WEEK, 100).runs == 0


def test_each_call_deletes_at_most_its_limit_oldest_first(store, clock):
    first = [finish(store, "canceled") for _ in range(3)]
    clock.advance(1)
    later = [finish(store, "canceled") for _ in range(2)]
    clock.advance(DAY)
    assert store.prune_runs(60, 2).runs == 2
    assert [store.get_run(run_id) for run_id in first[:2]] == [None, None]
    assert store.prune_runs(60, 2).runs == 2
    assert store.get_run(first[2]) is None and store.get_run(later[0]) is None
    assert store.prune_runs(60, 2).runs == 1
    assert store.get_run(later[1]) is None


def test_fired_ticks_older_than_the_retention_go_too(store, clock):
    now = store.due_schedules()[0].replace(second=0, microsecond=0) + timedelta(minutes=1)
    schedule = ScheduleDefinition("nightly", "t.contract", "* * * * *", "UTC")
    store.register_schedules([NewSchedule(schedule, now)])
    store.fire_schedule(Firing("nightly", now, (Tick(now, new_run()),), now + timedelta(minutes=1)))
    clock.advance(DAY)
    assert store.prune_runs(2 * DAY, 10).ticks == 0
    clock.advance(2 * DAY)
    report = store.prune_runs(2 * DAY, 10)
    assert (report.ticks, report.runs) == (1, 0)  # its run is still queued: kept
    assert execute_sql(store.url, "SELECT count(*) FROM tidegate_schedule_ticks") == [(0,)]
