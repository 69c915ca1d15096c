"""Schedules end to end with an App and an in-thread worker, on the injected clock (issue 15).

The clock is moved past ticks instead of sleeping through minutes; the
worker's maintenance thread looks for due ticks about once a second.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import pairwise

import pytest

from tests.conftest import wait_until
from tidegate import App, ConfigurationError, InvalidArgument, RunStatus, UnknownTask
from tidegate.domain.errors import ScheduleNotFound

MINUTE = 60.0


def now(app: App) -> datetime:
    return datetime.fromtimestamp(app.clock.wall(), UTC)


def fired(app: App, schedule: str) -> list[dict]:
    """The ScheduleFired metadata of a schedule's runs, oldest tick first."""
    found = [
        event.metadata
        for event in app.store.events_after(0, 10_000)
        if event.type == "ScheduleFired" and event.metadata["schedule"] == schedule
    ]
    return sorted(found, key=lambda metadata: metadata["tick"])


def to_next_tick(app: App, clock, name: str) -> None:
    [record] = [found for found in app.store.list_schedules() if found.name == name]
    clock.advance(max(0.0, (record.next_fire_at - now(app)).total_seconds()) + 0.5)


def test_a_decorated_task_runs_once_per_tick_with_its_args(tidegate_app, tidegate_clock, tidegate_drain):
    app = tidegate_app

    @app.schedule("*/5 * * * *", timezone="Europe/Paris", args={"x": 21})
    @app.task(name="s.double")
    def double(x: int) -> int:
        return 2 * x

    assert len(tidegate_drain(app)) == 0  # stores the schedule; no tick is due yet
    to_next_tick(app, tidegate_clock, "s.double")
    first = tidegate_drain(app)  # fires the due tick, then runs it
    to_next_tick(app, tidegate_clock, "s.double")
    second = tidegate_drain(app)
    assert [run.result for run in first.runs + second.runs] == [42, 42]
    ticks = [datetime.fromisoformat(metadata["tick"]) for metadata in fired(app, "s.double")]
    assert ticks[1] - ticks[0] == timedelta(minutes=5) and ticks[0].minute % 5 == 0
    [record] = app.store.list_schedules()
    assert record.last_fire_at == ticks[1] and record.last_run_id == second.runs[0].id


def test_missed_ticks_after_downtime_are_skipped_or_caught_up_per_schedule(
    tidegate_app, tidegate_clock, tidegate_drain
):
    app, clock = tidegate_app, tidegate_clock

    @app.task(name="s.report")
    def report(kind: str) -> str:
        return kind

    app.schedule(report, cron="* * * * *", args={"kind": "skip"}, name="skipping", missed="skip")
    app.schedule(report, cron="* * * * *", args={"kind": "catch"}, name="catching", missed="catch_up")
    app.worker()  # declarations are stored when a worker is built; no worker runs yet
    [record, _] = app.store.list_schedules()
    clock.advance((record.next_fire_at - now(app)).total_seconds() + 9 * MINUTE + 30)  # ten ticks pass, no worker
    assert tidegate_drain(app).completed == 11
    [skipped] = fired(app, "skipping")
    caught = fired(app, "catching")
    assert skipped["tick"] == caught[-1]["tick"]  # skip fires only the latest missed tick...
    assert skipped["skipped_from"] == caught[0]["tick"]  # ...and says from where it dropped the others
    ticks = [datetime.fromisoformat(metadata["tick"]) for metadata in caught]
    assert [b - a for a, b in pairwise(ticks)] == [timedelta(minutes=1)] * 9
    assert all("skipped_from" not in metadata for metadata in caught)
    to_next_tick(app, clock, "catching")  # back to normal: one tick, one run each
    assert tidegate_drain(app).completed == 2
    assert (len(fired(app, "catching")), len(fired(app, "skipping"))) == (11, 2)


def test_catching_up_is_bounded_to_the_latest_hundred_ticks(app, clock, start_worker):
    @app.task(name="s.often")
    def often() -> None:
        return None

    app.schedule(often, cron="* * * * *", missed="catch_up")
    app.worker()
    clock.advance(3 * 60 * MINUTE)  # 180 ticks
    start_worker()
    wait_until(lambda: len(fired(app, "s.often")) == 100, message="the caught-up ticks")
    caught = fired(app, "s.often")
    assert "skipped_from" in caught[0]
    assert datetime.fromisoformat(caught[-1]["tick"]) > now(app) - timedelta(minutes=1)


def test_a_paused_schedule_fires_nothing_until_resumed_and_does_not_make_up_its_pause(app, clock, start_worker):
    @app.task(name="s.ping")
    def ping(who: str) -> str:
        return who

    app.schedule(ping, cron="* * * * *", args={"who": "paused"}, name="paused", missed="catch_up")
    app.schedule(ping, cron="* * * * *", args={"who": "witness"}, name="witness")
    assert app.pause_schedule("paused") is True
    assert app.pause_schedule("paused") is False
    start_worker()
    for count in (1, 2, 3):
        to_next_tick(app, clock, "witness")
        wait_until(lambda count=count: len(fired(app, "witness")) == count, message="the witness's ticks")
    assert fired(app, "paused") == []  # due in the same passes as the witness, and not fired
    assert [record.paused for record in app.store.list_schedules()] == [True, False]
    assert app.resume_schedule("paused") is True
    to_next_tick(app, clock, "paused")
    wait_until(lambda: fired(app, "paused"), message="the resumed schedule")
    [resumed] = fired(app, "paused")
    assert "skipped_from" not in resumed  # the ticks of the pause were not caught up
    with pytest.raises(ScheduleNotFound, match="nope"):
        app.pause_schedule("nope")


@pytest.mark.parametrize(
    "options, error, match",
    [
        ({"cron": "*/5 * *"}, InvalidArgument, r"cron expression '\*/5 \* \*'"),
        ({"cron": "61 * * * *"}, InvalidArgument, "cron expression '61"),
        ({"cron": "* * * * *", "timezone": "Mars/Olympus"}, InvalidArgument, "time zone 'Mars/Olympus'"),
        ({"cron": "* * * * *", "missed": "later"}, InvalidArgument, "missed='later'"),
        ({"cron": "* * * * *", "args": {"y": 1}}, InvalidArgument, "unknown argument 'y'"),
        ({"cron": "* * * * *", "args": {"x": {1, 2}}}, InvalidArgument, "argument 'x'"),
        ({"cron": "* * * * *", "name": "bad name"}, InvalidArgument, "schedule name 'bad name'"),
    ],
)
def test_a_bad_declaration_is_refused_naming_what_is_wrong_and_stores_nothing(app, options, error, match):
    @app.task(name="s.target")
    def target(x: int = 0) -> int:
        return x

    with pytest.raises(error, match=match):
        app.schedule(target, **options)
    app.worker()
    assert app.store.list_schedules() == []


def test_misuse_of_the_decorator_and_unknown_tasks_are_clear(app):
    with pytest.raises(ConfigurationError, match=r"above @app\.task"):

        @app.schedule("* * * * *")
        def plain() -> None:
            return None

    with pytest.raises(UnknownTask, match=r"s\.missing"):
        app.schedule("s.missing", cron="* * * * *")

    @app.task(name="s.twice")
    def twice() -> None:
        return None

    app.schedule(twice, cron="* * * * *")
    with pytest.raises(ConfigurationError, match="own name="):
        app.schedule(twice, cron="0 * * * *")


def test_the_worker_sweeper_prunes_finished_runs_past_the_retention(app, clock, start_worker, monkeypatch):
    monkeypatch.setenv("TIDEGATE_RETENTION", "1h")
    monkeypatch.setenv("TIDEGATE_SWEEP_INTERVAL", "200ms")

    @app.task(name="s.done")
    def done() -> int:
        return 1

    app.queue("parked")
    old = done.submit()
    worker = start_worker()
    assert old.wait(timeout=30) == 1
    parked = done.options(queue="parked").submit()  # a queue no worker serves: stays queued
    clock.advance(2 * 3600)
    recent = done.submit()
    assert recent.wait(timeout=30) == 1
    wait_until(lambda: app.store.get_run(old.id) is None, message="the old run pruned")
    assert app.store.run_events(old.id) == []
    assert app.store.get_run(parked.id).status is RunStatus.QUEUED
    assert app.store.run_events(parked.id) != []
    assert app.store.get_run(recent.id).status is RunStatus.COMPLETED
    assert worker.settings.retention == 3600


def test_a_retention_out_of_range_is_refused_naming_the_variable(app, monkeypatch):
    @app.task(name="s.any")
    def anything() -> None:
        return None

    monkeypatch.setenv("TIDEGATE_RETENTION", "10s")
    with pytest.raises(ConfigurationError, match="TIDEGATE_RETENTION"):
        app.worker()
    monkeypatch.setenv("TIDEGATE_RETENTION", "a week")
    with pytest.raises(ConfigurationError, match="TIDEGATE_RETENTION"):
        app.worker()
