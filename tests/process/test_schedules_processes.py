"""Schedules across worker processes: each tick submits exactly one run (issue 15).

Three worker processes on PostgreSQL and two on SQLite fire the same schedule
(every second, `missed="catch_up"`); midway every worker is killed (SIGKILL) and,
after a few ticks with no worker at all, as many new ones start. The
ScheduleFired events must then name every tick from the first to the last
exactly once: none doubled by workers racing, none lost across the restart.
"""

from __future__ import annotations

import time
from collections import Counter
from datetime import datetime, timedelta

import pytest

from tests.apps.scheduled import EVERY, make_app

from .conftest import wait_until

pytestmark = pytest.mark.slow

TARGET = "tests.apps.scheduled:app"


def fired_ticks(app) -> Counter[datetime]:
    ticks: Counter[datetime] = Counter()
    for event in app.store.events_after(0, 100_000):
        if event.type == "ScheduleFired":
            ticks[datetime.fromisoformat(event.metadata["tick"])] += 1
    return ticks


@pytest.mark.parametrize("backend, processes", [("postgres", 3), ("sqlite", 2)])
def test_each_tick_fires_once_across_workers_and_a_restart_of_them_all(backend, processes, request, worker_processes):
    url = request.getfixturevalue(f"{backend}_url")
    with make_app(url) as app:
        app.store  # noqa: B018 - migrate before the workers race to
        first = [worker_processes.spawn(TARGET, url, max_workers=2) for _ in range(processes)]
        wait_until(lambda: len(fired_ticks(app)) >= 4, timeout=60, message="ticks fired by the first workers")
        for process in first:
            worker_processes.kill(process)
        down_at = fired_ticks(app)
        time.sleep(3 * EVERY)  # ticks come due with no worker to fire them
        [worker_processes.spawn(TARGET, url, max_workers=2) for _ in range(processes)]
        wait_until(
            lambda: max(fired_ticks(app)) >= max(down_at) + timedelta(seconds=6 * EVERY),
            timeout=60,
            message="ticks fired after the restart",
        )
        ticks = fired_ticks(app)
        doubled = {tick: count for tick, count in ticks.items() if count > 1}
        assert doubled == {}
        start, end = min(ticks), max(ticks)
        expected = {start + timedelta(seconds=EVERY * n) for n in range(int((end - start).total_seconds() / EVERY) + 1)}
        assert set(ticks) == expected, f"lost ticks: {sorted(expected - set(ticks))}"
        runs = [run for run in app.store.page_runs(limit=10_000) if run.task == "scheduled.beat"]
        assert len(runs) == len(ticks)
        fired_by = {
            event.metadata["worker"]
            for run in runs
            for event in app.store.run_events(run.id)
            if event.type == "RunDequeued"
        }
        assert fired_by  # the runs were executed, too
