"""A woken worker's claim after a look that found room (`peek_cycle`, then `cycle`).

A worker that was waiting last claimed nothing, so its next claim locked no
scope ahead and took 3 round trips (window; scope lock and usage; claim and
commit), after the look's one. When the look found a queued run and room in
every scope that could close its queues, the claim now locks those scopes in
its first batch: 2 round trips. PostgreSQL only (round trips, scope rows).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests import races
from tidegate import App, RunQueueConfig, RunStatus
from tidegate.domain.model import CycleRequest
from tidegate.storage.postgres import claim

from .test_children_round_trips import counted_trips

LEASE = 60.0
MUTATION = pytest.mark.parametrize("removed", [False, True], ids=["intact", "removed"])


@pytest.fixture(autouse=True)
def _postgres_only(backend):
    if backend != "postgres":
        pytest.skip("round trips and scope rows are PostgreSQL's (SQLite has one writer)")


def _woken(app: App, worker: str, queue: str) -> Any:
    """As the worker loop does it: the look, then the claim when the look cannot tell."""
    return app.store.peek_cycle(worker, [queue]) or app.store.cycle(CycleRequest(worker, [queue], [], [], 1, LEASE))


def test_a_claim_after_a_look_that_found_room_costs_two_round_trips(database_url, monkeypatch):
    with App(database_url, run_queue=RunQueueConfig(max_concurrent_runs=4)) as app:
        work = app.task(name="looked.work", queue="g")(lambda n: n)
        work.submit(n=0)
        assert len(app.store.cycle(CycleRequest("w0", ["g"], [], [], 1, LEASE)).claimed) == 1  # caches the rules
        assert app.store.cycle(CycleRequest("w1", ["g"], [], [], 1, LEASE)).claimed == []  # found none: waits, idle
        work.submit(n=1)
        assert app.store.peek_cycle("w1", ["g"]) is None  # a run, and room: claim
        with counted_trips(monkeypatch) as looked:
            assert len(app.store.cycle(CycleRequest("w1", ["g"], [], [], 1, LEASE)).claimed) == 1
        assert looked.trips == 2


@MUTATION
def test_two_woken_workers_never_both_take_the_last_slot_of_the_global_cap(database_url, monkeypatch, removed):
    """Both looks find the one free slot; the first claim locks the `global` row ahead (its first
    batch) and parks before it writes; the second must wait for that lock and then see the slot
    taken. Without `lock_scopes` both take it."""
    with App(database_url, run_queue=RunQueueConfig(max_concurrent_runs=3)) as app:
        work_a = app.task(name="looked.a", queue="qa")(lambda n: n)
        work_b = app.task(name="looked.b", queue="qb")(lambda n: n)
        work_a.submit_many([{"n": n} for n in range(2)])
        assert len(app.store.cycle(CycleRequest("w0", ["qa"], [], [], 2, LEASE)).claimed) == 2
        for worker, queue in (("wa", "qa"), ("wb", "qb")):
            assert app.store.cycle(CycleRequest(worker, [queue], [], [], 1, LEASE)).claimed == []  # each waits, idle
        work_a.submit(n=10)
        work_b.submit(n=20)
        races.track(app.store)
        if removed:
            races.remove_query(app.store, "lock_scopes")
        monkeypatch.setattr(claim, "admit", races.seam(claim.admit))  # park after the usage read
        first = races.Party("woken-a", lambda: _woken(app, "wa", "qa").claimed)
        second = races.Party("woken-b", lambda: _woken(app, "wb", "qb").claimed)
        race = races.Race(database_url)
        try:
            race.run(first, second)
        finally:
            race.close()
        running = app.store.status_counts(None)[RunStatus.RUNNING]
        violation = running > 3 or first.error is not None or second.error is not None
        assert violation is removed, (running, first.error, second.error)
        if not removed:
            assert [len(first.result), len(second.result)] == [1, 0]
