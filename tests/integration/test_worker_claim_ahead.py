"""Runs a worker claims ahead of its free slots wait for a slot: never more than max_workers run.

Where no limit applies, a turn that reports ended runs also claims as many more
(`worker/loop.py` `_room`), up to AHEAD_PER_SLOT x max_workers; the dispatcher
keeps them until a slot frees. Taken out (every claimed run started at once),
the runs at once exceed max_workers; the cap taken out, the claims outgrow it.
A run still waiting when the worker stops is handed back unstarted, and one
canceled while it waits ends canceled without running. Both adapters.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from tests.conftest import wait_status, wait_until
from tidegate import RunStatus
from tidegate.domain.model import CycleRequest
from tidegate.worker import loop
from tidegate.worker.dispatch import Dispatcher

QUEUE = "ahead"
MUTATION = pytest.mark.parametrize("removed", [False, True], ids=["intact", "removed"])


@MUTATION
def test_runs_claimed_ahead_never_run_past_max_workers(app: Any, monkeypatch: Any, removed: bool) -> None:
    lock = threading.Lock()
    running, most = [0], [0]

    @app.task(name="ahead.short", queue=QUEUE)
    async def short(i: int) -> None:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        await asyncio.sleep(0.02)  # long enough for the next turn's claim to land while these run
        with lock:
            running[0] -= 1

    waited = [0]
    real = Dispatcher.dispatch

    def dispatch(self: Dispatcher, run: Any, sent: float) -> None:
        if removed:
            self._start(run, sent)
            return
        real(self, run, sent)
        waited[0] = max(waited[0], len(self._waiting))

    monkeypatch.setattr(Dispatcher, "dispatch", dispatch)
    short.submit_many([{"i": i} for i in range(24)])
    app.worker(queues=[QUEUE], max_workers=2, drain=True).run()
    assert app.store.run_counts()[(QUEUE, RunStatus.COMPLETED)] == 24
    assert (most[0] > 2) is removed, most[0]
    if not removed:
        assert most[0] == 2 and waited[0] > 0  # runs were claimed ahead, and waited


@MUTATION
def test_a_draining_claim_grows_with_the_runs_that_end_up_to_its_cap(app: Any, monkeypatch: Any, removed: bool) -> None:
    """Each turn claims ahead as many runs as ended since the last one, so a drain of short runs
    takes ever bigger batches, past one max_workers' worth ahead, but never more than the cap
    (`AHEAD_PER_SLOT` x max_workers) beside the free slots. Cap taken out: the claims outgrow it."""

    @app.task(name="ahead.noop", queue=QUEUE)
    async def noop(i: int) -> None:
        return None

    if removed:
        monkeypatch.setattr(loop, "AHEAD_PER_SLOT", 1_000)
    store = app.store
    real_cycle = store.cycle
    limits: list[int] = []

    def cycle(request: CycleRequest) -> Any:
        limits.append(request.claim_limit)
        return real_cycle(request)

    store.cycle = cycle
    noop.submit_many([{"i": i} for i in range(80)])
    app.worker(queues=[QUEUE], max_workers=2, drain=True).run()
    assert app.store.run_counts()[(QUEUE, RunStatus.COMPLETED)] == 80
    cap = 2 + 4 * 2  # the free slots and AHEAD_PER_SLOT per slot
    assert max(limits) > 2 + 2, limits  # more than one max_workers' worth ahead
    assert (max(limits) > cap) is removed, limits


def _one_waiting(app: Any, start_worker: Any) -> tuple[Any, str, str]:
    """A worker of one slot: a quick run ends, so the next turn claims the blocking run and one
    ahead, which waits. Returns the worker, the blocking run's id and the waiting run's."""

    @app.task(name="ahead.quick", queue=QUEUE)
    async def quick() -> None:
        return None

    @app.task(name="ahead.block", queue=QUEUE)
    async def block() -> None:
        await asyncio.sleep(60)

    quick.submit()
    blocking = block.submit().id
    waiting = quick.submit().id
    worker = start_worker(queues=[QUEUE], max_workers=1)
    dispatcher = worker._dispatcher
    wait_until(lambda: [run.id for run, _ in dispatcher._waiting] == [waiting], message="a run claimed ahead")
    return worker, blocking, waiting


def test_a_run_still_waiting_when_the_worker_stops_is_handed_back_unstarted(app: Any, start_worker: Any) -> None:
    worker, blocking, waiting = _one_waiting(app, start_worker)
    worker.stop(timeout=30, grace=0)
    for run_id in (blocking, waiting):
        record = app.store.get_run(run_id)
        assert (record.status, record.attempt) == (RunStatus.QUEUED, 1), record
    assert "RunStarted" not in [event.type for event in app.store.run_events(waiting)]


def test_a_run_canceled_while_it_waits_ends_canceled_without_running(app: Any, start_worker: Any) -> None:
    _, blocking, waiting = _one_waiting(app, start_worker)
    app.run(waiting).cancel()
    wait_status(app, waiting, RunStatus.CANCELED)
    assert "RunStarted" not in [event.type for event in app.store.run_events(waiting)]
    assert app.store.get_run(blocking).status is RunStatus.RUNNING
