"""What one PostgreSQL claim costs, per path of `Claims.cycle`: round trips and statements, exact.

The claim plan (domain/claim_plan.py) picks the path: one statement where no
limit applies, the general claim elsewhere (its first batch locking ahead the
scopes the cached rules or the last claims name), a look (`peek_cycle`) that
proves a claim futile. These counts are what the code sends and waits for
(`TripCounter`, as the code sees it), so restructuring the cycle must leave
every one of them as it is; a path that sends one statement more, or waits
once more, fails here.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from tidegate import App, Concurrency, Partition, Rate, RunQueueConfig
from tidegate.domain.model import CycleRequest

from .test_children_round_trips import counted_trips

LEASE = 60.0


@pytest.fixture(autouse=True)
def _postgres_only(backend):
    if backend != "postgres":
        pytest.skip("round trips and statements per claim are PostgreSQL's (SQLite runs in process)")


def _cycle(app: App, worker: str, queue: str, limit: int) -> Any:
    return app.store.cycle(CycleRequest(worker, [queue], [], [], limit, LEASE))


def _costs(app: App, monkeypatch: pytest.MonkeyPatch, worker: str, queue: str, limit: int) -> tuple[int, int, int]:
    """(round trips, statements, runs claimed) of one claim."""
    with counted_trips(monkeypatch) as counter:
        claimed = len(_cycle(app, worker, queue, limit).claimed)
    return counter.trips, counter.sent, claimed


def test_a_free_claim_is_one_statement_in_one_round_trip(database_url, monkeypatch):
    with App(database_url) as app:
        work = app.task(name="costs.free", queue="f")(lambda n: n)
        work.submit_many([{"n": n} for n in range(3)])
        app.store.rules()  # cached: the plan is free
        assert _costs(app, monkeypatch, "w1", "f", 2) == (1, 3, 2)


@pytest.mark.parametrize(
    ("queue_limit", "run_queue"),
    [(None, RunQueueConfig(max_concurrent_runs=8)), (8, None)],
    ids=["global cap", "queue limit"],
)
def test_a_limited_claim_of_a_busy_queue_costs_two_round_trips(database_url, monkeypatch, queue_limit, run_queue):
    with App(database_url, run_queue=run_queue) as app:
        app.queue("l", concurrency=Concurrency(global_limit=queue_limit))
        work = app.task(name="costs.limited", queue="l")(lambda n: n)
        work.submit_many([{"n": n} for n in range(4)])
        assert len(_cycle(app, "w0", "l", 1).claimed) == 1  # caches the rules; the queue is busy
        assert _costs(app, monkeypatch, "w1", "l", 1) == (2, 11, 1)


def test_a_claim_that_finds_its_queue_limit_full_costs_two_round_trips(database_url, monkeypatch):
    with App(database_url) as app:
        app.queue("full", concurrency=Concurrency(global_limit=1))
        work = app.task(name="costs.full", queue="full")(lambda n: n)
        work.submit_many([{"n": n} for n in range(4)])
        assert len(_cycle(app, "w0", "full", 1).claimed) == 1
        assert _costs(app, monkeypatch, "w1", "full", 1) == (2, 11, 0)


def test_a_limited_claim_of_a_queue_not_claimed_from_yet_costs_three_round_trips(database_url, monkeypatch):
    """Nothing is locked ahead before a claim of the queue found runs: its scope is locked, and its
    usage read, after the window (a round trip of its own)."""
    with App(database_url) as app:
        app.queue("idle", concurrency=Concurrency(global_limit=2))
        work = app.task(name="costs.idle", queue="idle")(lambda n: n)
        work.submit_many([{"n": n} for n in range(4)])
        app.store.rules()
        assert _costs(app, monkeypatch, "w1", "idle", 8) == (3, 14, 2)


def test_a_first_claim_of_a_partitioned_queue_costs_three_round_trips(database_url, monkeypatch):
    with App(database_url) as app:
        app.queue("p", concurrency=Concurrency(global_limit=5, partition=Partition(by_args=["customer"])))
        work = app.task(name="costs.part", queue="p")(lambda customer: customer)
        work.submit_many([{"customer": f"c{n % 3}"} for n in range(6)])
        app.store.rules()
        assert _costs(app, monkeypatch, "w1", "p", 2) == (3, 12, 2)


def test_a_claim_under_a_local_limit_costs_two_round_trips(database_url, monkeypatch):
    with App(database_url) as app:
        app.queue("loc", concurrency=Concurrency(local_limit=2))
        work = app.task(name="costs.local", queue="loc")(lambda n: n)
        work.submit_many([{"n": n} for n in range(4)])
        app.store.rules()
        assert _costs(app, monkeypatch, "w1", "loc", 1) == (2, 10, 1)


def test_a_look_that_proves_a_claim_futile_is_one_statement(database_url, monkeypatch):
    with App(database_url, run_queue=RunQueueConfig(max_concurrent_runs=1)) as app:
        work = app.task(name="costs.peek", queue="pk")(lambda n: n)
        work.submit_many([{"n": n} for n in range(2)])
        assert len(_cycle(app, "w0", "pk", 1).claimed) == 1  # the cap is full now
        with counted_trips(monkeypatch) as counter:
            assert app.store.peek_cycle("w1", ["pk"]) is not None
        assert (counter.trips, counter.sent) == (1, 1)


def test_a_claim_under_a_rate_that_never_binds_takes_the_general_path(database_url, monkeypatch):
    """A rate keeps its queue off the one-statement claim: its states are read, locked and written
    in the claim (the cost issue 25's never-binding benchmark measures against no rate); a queue's
    one budget is locked in the first batch, under the queue's turn (claim.py)."""
    with App(database_url) as app:
        app.queue("loose", rate=Rate(limit=1_000_000, per="1s"))
        work = app.task(name="costs.loose", queue="loose")(lambda n: n)
        work.submit_many([{"n": n} for n in range(6)])
        assert len(_cycle(app, "w0", "loose", 2).claimed) == 2  # caches the rules; the queue is busy
        assert _costs(app, monkeypatch, "w1", "loose", 2) == LOOSE_RATE_CLAIM


LOOSE_RATE_CLAIM = (2, 12, 2)


def test_a_claim_under_a_partitioned_rate_locks_its_states_after_reading_the_runs(database_url, monkeypatch):
    """A partitioned rate's windows depend on the runs read: locked in a round trip of their own."""
    with App(database_url) as app:
        app.queue("split", rate=Rate(limit=1_000_000, per="1s"), rate_partition=Partition(by_args=["n"]))
        work = app.task(name="costs.split", queue="split")(lambda n: n)
        work.submit_many([{"n": n} for n in range(6)])
        assert len(_cycle(app, "w0", "split", 2).claimed) == 2
        assert _costs(app, monkeypatch, "w1", "split", 2) == (3, 12, 2)


def test_a_paced_claim_does_not_rewrite_the_reasons_of_the_runs_its_rate_still_holds(database_url, monkeypatch):
    """Runs a rate held back keep the reason a claim stored, though each charge moves the time the
    rate next allows a start: a claim that charges one more run and holds back the same runs
    sends no block reasons (nor their RunBlocked events) again."""
    with App(database_url) as app:
        app.queue("paced", rate=Rate(limit=1000, per="1s", burst=1))
        work = app.task(name="costs.paced", queue="paced")(lambda n: n)
        handles = work.submit_many([{"n": n} for n in range(5)])
        assert len(_cycle(app, "w0", "paced", 8).claimed) == 1  # the others are held, with a reason each
        time.sleep(0.01)  # ten intervals: the next claim charges one more, the retry time moves
        assert _costs(app, monkeypatch, "w1", "paced", 8) == PACED_CLAIM
        blocked = app.store.run_events(handles[-1].id)
        assert [event.type for event in blocked].count("RunBlocked") == 1


PACED_CLAIM = (2, 13, 1)
