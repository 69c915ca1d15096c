"""Pool slots handed from step to step inside workflow runs, on both backends.

A finishing step hands its slots to the next step of its run waiting for
them, in memory while no other run waits, else through the store. These
tests record, from inside the steps, when each one runs, and check the
limit against what the steps saw and against the store's own events.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time

import pytest

from tests.apps.gates import max_overlap
from tests.thread_gate import ThreadGate
from tidegate import Executor, RunFailed, Workflow
from tidegate.domain.steps import StepStatus

from .conftest import execute_sql, wait_until

LIMIT = 3


def most_claimed(app, run_ids: list[str], pool: str) -> int:
    """The most slots of `pool` held at once, replaying every run's StepSlotClaimed/Released in commit order."""
    events = sorted((e for run_id in run_ids for e in app.store.run_events(run_id)), key=lambda e: e.id)
    held = most = 0
    for event in events:
        if event.type == "StepSlotClaimed":
            held += event.metadata["pools"].get(pool, 0)
        elif event.type == "StepSlotReleased":
            held -= event.metadata["pools"].get(pool, 0)
        most = max(most, held)
    return most


def test_handed_on_slots_never_let_more_steps_run_than_the_limit(app, start_worker):
    app.set_pool_limit("db", LIMIT, lease_duration="5m")
    intervals: list[tuple[float, float]] = []
    ran: list[int] = []
    rng = random.Random(7)
    pauses = [rng.uniform(0.001, 0.006) for _ in range(60)]

    @app.step(pool="db")
    async def query(n: int) -> int:
        started = time.monotonic()
        await asyncio.sleep(pauses[n % len(pauses)])
        intervals.append((started, time.monotonic()))
        ran.append(n)
        return n

    @app.workflow(name="t.handoff", executor=Executor.parallel(max_async_concurrent=20))
    def many(wf: Workflow, first: int):
        return wf.step(total, [wf.step(query, n) for n in range(first, first + 60)])

    @app.step
    def total(values: list[int]) -> int:
        return sum(values)

    start_worker(max_workers=2)
    runs = [many.submit(first=0), many.submit(first=60)]  # two runs: sometimes one waits for the other
    assert [run.wait(timeout=120) for run in runs] == [sum(range(60)), sum(range(60, 120))]
    assert sorted(ran) == list(range(120))
    assert max_overlap(intervals) <= LIMIT
    assert most_claimed(app, [run.id for run in runs], "db") <= LIMIT
    for run in runs:  # every claim of a step was given back by that step: none lingered until the run's end
        balance: dict[str, int] = {}
        for event in app.store.run_events(run.id):
            if event.type in ("StepSlotClaimed", "StepSlotReleased"):
                balance[event.step_key] = balance.get(event.step_key, 0) + (
                    1 if event.type == "StepSlotClaimed" else -1
                )
        assert {key: count for key, count in balance.items() if count} == {}
    handed = [e for run in runs for e in app.store.run_events(run.id) if "handed_from" in e.metadata]
    assert handed, "no slot was handed on: the path under test did not run"
    assert all(pool.claimed == 0 and pool.pending == 0 for pool in app.store.pools())


def test_a_run_stops_keeping_its_slots_once_another_run_waits(app, start_worker):
    app.set_pool_limit("db", 1, lease_duration="5m")
    gate = ThreadGate()

    @app.step(pool="db")
    async def hold(n: int) -> int:
        assert await gate.wait_async(60)
        await asyncio.sleep(0.03)
        return n

    @app.workflow(name="t.keeper", executor=Executor.parallel(max_async_concurrent=30))
    def keeper(wf: Workflow, steps: int):
        return wf.step(count, [wf.step(hold, n) for n in range(steps)])

    @app.step
    def count(values: list[int]) -> int:
        return len(values)

    start_worker(max_workers=2)
    long_run = keeper.submit(steps=20)

    def pool_status():
        return next((pool for pool in app.store.pools() if pool.name == "db"), None)

    wait_until(lambda: (status := pool_status()) is not None and status.pending == 19, message="19 steps waiting")
    short_run = keeper.submit(steps=3)
    wait_until(lambda: pool_status().pending == 22, message="the second run's steps waiting too")
    gate.set()
    assert short_run.wait(timeout=120) == 3
    assert long_run.wait(timeout=120) == 20
    # Read from the store's claims, not from which run completes first: the short run's last step
    # (`count`, a sync step, the first to start the worker's process pool) may outlast the long
    # run's remaining steps, which hand the slot on in memory at once when nobody else waits.
    claims = sorted(
        (e.id, run.id)
        for run in (long_run, short_run)
        for e in app.store.run_events(run.id)
        if e.type == "StepSlotClaimed"
    )
    last_of_long = max(index for index, (_, run_id) in enumerate(claims) if run_id == long_run.id)
    short = [index for index, (_, run_id) in enumerate(claims) if run_id == short_run.id]
    assert len(short) == 3 and max(short) < last_of_long, "the long run kept the pool until it was done"


def test_a_step_whose_slots_are_freed_under_it_is_stopped_and_fails(app, start_worker, database_url):
    app.set_pool_limit("db", 1, lease_duration=0.6)  # renewed every 0.2s
    started = threading.Event()
    finished: list[int] = []

    @app.step(pool="db")
    async def long_query(n: int) -> int:
        started.set()
        await asyncio.sleep(20)
        finished.append(n)
        return n

    @app.workflow(name="t.lost", executor=Executor.parallel(max_async_concurrent=2))
    def lost(wf: Workflow):
        return wf.step(long_query, 1)

    start_worker()
    run = lost.submit()
    assert started.wait(30)
    execute_sql(database_url, "DELETE FROM tidegate_holders WHERE scope = ?", ("pool:db",))  # as a sweep would
    with pytest.raises(RunFailed, match="SlotsLost: its pool slots were lost while it ran"):
        run.wait(timeout=15)
    assert finished == []
    [step] = app.store.run_steps(run.id)
    assert step.status is StepStatus.FAILED
