"""Schedules through the Store port: declarations, cursors, and a tick fired once.

`fire_schedule` stores a plan's runs only if the schedule's cursor is still the
one the plan was computed from and no tick of it has a row yet (the unique key
per schedule and tick); otherwise it stores nothing. Same on both adapters.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tidegate import AdmissionRejected
from tidegate.domain.errors import ScheduleNotFound
from tidegate.domain.limits import QueueConfig
from tidegate.domain.model import RunStatus
from tidegate.domain.schedules import Firing, NewSchedule, ScheduleDefinition, Tick

from .conftest import QUEUE, execute_sql, new_run

MINUTE = timedelta(minutes=1)


def definition(name: str = "every-minute", cron: str = "* * * * *", **changes) -> ScheduleDefinition:
    return ScheduleDefinition(name=name, task="t.contract", cron=cron, timezone="UTC", args={"x": 1}, **changes)


def minute_after(moment: datetime) -> datetime:
    return moment.replace(second=0, microsecond=0) + MINUTE


def declare(store, first: datetime, **changes) -> ScheduleDefinition:
    declared = definition(**changes)
    store.register_schedules([NewSchedule(declared, first)])
    return declared


def firing(store, name: str = "every-minute", ticks: int = 1) -> Firing:
    [record] = [found for found in store.list_schedules() if found.name == name]
    at = [record.next_fire_at + index * MINUTE for index in range(ticks)]
    return Firing(
        schedule=name,
        expected_next=record.next_fire_at,
        ticks=tuple(Tick(moment, new_run(args={"x": 1})) for moment in at),
        next_fire_at=at[-1] + MINUTE,
    )


def now_of(store) -> datetime:
    return store.due_schedules()[0]


def test_a_declared_schedule_is_listed_and_due_once_its_first_tick_has_come(store, clock):
    first = minute_after(now_of(store))
    declared = declare(store, first)
    [record] = store.list_schedules()
    assert (record.definition, record.next_fire_at, record.last_fire_at, record.paused) == (
        declared,
        first,
        None,
        False,
    )
    assert store.due_schedules()[1] == []
    clock.advance(61)
    now, due = store.due_schedules()
    assert now >= first and [found.name for found in due] == ["every-minute"]


def test_redeclaring_keeps_the_cursor_and_the_pause_unless_the_expression_changes(store):
    first = minute_after(now_of(store))
    declare(store, first)
    store.set_schedule_paused("every-minute", True)
    store.register_schedules([NewSchedule(definition(missed="catch_up"), first + 10 * MINUTE)])
    [kept] = store.list_schedules()
    assert (kept.next_fire_at, kept.paused, kept.definition.missed) == (first, True, "catch_up")
    store.register_schedules([NewSchedule(definition(cron="*/5 * * * *"), first + 10 * MINUTE)])
    [moved] = store.list_schedules()
    assert (moved.next_fire_at, moved.paused, moved.definition.cron) == (first + 10 * MINUTE, True, "*/5 * * * *")


def test_firing_stores_the_runs_with_their_events_and_moves_the_cursor(store, clock):
    first = minute_after(now_of(store))
    declare(store, first)
    plan = firing(store, ticks=2)
    fired = store.fire_schedule(plan)
    assert fired == [tick.run.id for tick in plan.ticks]
    for tick in plan.ticks:
        run = store.get_run(tick.run.id)
        assert (run.status, run.args) == (RunStatus.QUEUED, {"x": 1})
        events = store.run_events(tick.run.id)
        assert [event.type for event in events] == ["RunQueued", "ScheduleFired"]
        assert events[1].metadata == {"schedule": "every-minute", "tick": tick.at.isoformat()}
    [record] = store.list_schedules()
    assert (record.next_fire_at, record.last_fire_at) == (first + 2 * MINUTE, first + MINUTE)
    assert record.last_run_id == plan.ticks[-1].run.id


def test_a_stale_plan_fires_nothing(store):
    """Two workers planned from the same cursor: one saw only the first tick due, the other (later,
    under `skip`) only the second. Whichever commits second finds the cursor moved and stores nothing."""
    first = minute_after(now_of(store))
    declare(store, first)
    early = firing(store)
    late = Firing("every-minute", first, (Tick(first + MINUTE, new_run()),), first + 2 * MINUTE, skipped_from=first)
    assert store.fire_schedule(late) == [late.ticks[0].run.id]
    assert store.fire_schedule(early) == []
    assert store.get_run(early.ticks[0].run.id) is None
    assert store.fire_schedule(late) == []  # and the same plan twice fires once


def test_a_tick_whose_row_exists_fires_nothing_and_keeps_the_cursor(store):
    """The unique key per (schedule, tick) is the proof: a conflicting insert stores no run."""
    first = minute_after(now_of(store))
    declare(store, first)
    plan = firing(store, ticks=2)
    tick_at = plan.ticks[1].at.timestamp() if store.url.startswith("sqlite") else plan.ticks[1].at
    execute_sql(
        store.url,
        "INSERT INTO tidegate_schedule_ticks (schedule, tick_at, run_id, fired_at) VALUES (?, ?, 'other', ?)",
        ("every-minute", tick_at, tick_at),
    )
    assert store.fire_schedule(plan) == []
    assert [store.get_run(tick.run.id) for tick in plan.ticks] == [None, None]
    assert store.list_schedules()[0].next_fire_at == first


def test_a_paused_schedule_is_never_due_nor_fired_and_resumes_where_told(store, clock):
    first = minute_after(now_of(store))
    declare(store, first)
    plan = firing(store)
    assert store.set_schedule_paused("every-minute", True) is True
    assert store.set_schedule_paused("every-minute", True) is False
    clock.advance(120)
    assert store.due_schedules()[1] == []
    assert store.fire_schedule(plan) == []
    later = first + 30 * MINUTE
    assert store.set_schedule_paused("every-minute", False, later) is True
    [record] = store.list_schedules()
    assert (record.paused, record.next_fire_at) == (False, later)


def test_unknown_schedules_are_refused_and_removal_keeps_fired_runs(store):
    with pytest.raises(ScheduleNotFound, match="nope"):
        store.set_schedule_paused("nope", True)
    with pytest.raises(ScheduleNotFound, match="nope"):
        store.remove_schedule("nope")
    declare(store, minute_after(now_of(store)))
    [run_id] = store.fire_schedule(firing(store))
    store.remove_schedule("every-minute")
    assert store.list_schedules() == []
    assert store.get_run(run_id).status is RunStatus.QUEUED


def test_a_firing_refused_by_admission_stores_nothing_and_keeps_the_cursor(store):
    store.register_limits(None, [QueueConfig(QUEUE, max_active=1)], [])
    store.enqueue([new_run()])
    first = minute_after(now_of(store))
    declare(store, first)
    plan = firing(store)
    with pytest.raises(AdmissionRejected):
        store.fire_schedule(plan)
    assert store.get_run(plan.ticks[0].run.id) is None
    assert store.list_schedules()[0].next_fire_at == first
    assert execute_sql(store.url, "SELECT count(*) FROM tidegate_schedule_ticks") == [(0,)]


def test_due_schedules_reads_the_store_clock(store, clock):
    before = now_of(store)
    clock.advance(3600)
    assert now_of(store) - before >= timedelta(seconds=3600)
    assert now_of(store).tzinfo is not None and now_of(store).utcoffset() == UTC.utcoffset(None)


def test_workers_racing_to_fire_the_same_ticks_store_each_once(store, database_url, clock):
    """Eight stores (a worker's each) fire plans of the same ticks at once: one firing wins per tick."""
    from concurrent.futures import ThreadPoolExecutor
    from threading import Barrier

    from tidegate.bootstrap import open_store

    first = minute_after(now_of(store))
    for index in range(5):
        declare(store, first, name=f"race-{index}")
    racers = [open_store(database_url, clock=clock) for _ in range(8)]
    try:
        for index in range(5):
            plans = [firing(store, f"race-{index}", ticks=2) for _ in racers]
            barrier = Barrier(len(racers))

            def fire(pair, barrier=barrier):
                racer, plan = pair
                barrier.wait()
                return racer.fire_schedule(plan)

            with ThreadPoolExecutor(len(racers)) as pool:
                results = list(pool.map(fire, zip(racers, plans, strict=True)))
            assert sorted(len(result) for result in results) == [0] * 7 + [2]
    finally:
        for racer in racers:
            racer.close()
    assert execute_sql(database_url, "SELECT count(*) FROM tidegate_runs") == [(10,)]
    assert execute_sql(database_url, "SELECT count(*) FROM tidegate_schedule_ticks") == [(10,)]
