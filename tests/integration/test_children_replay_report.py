"""A resumed parent whose replay is answered from the store reports its outcome at once (both adapters).

Its body has nothing left to do (every child it waits for has ended), so its
outcome must not wait for the worker's next turn while it holds its slots.
The test holds the resumed parent's body until a turn of the worker loop (a
store cycle on its `tidegate-db` thread) has recorded the attempt's start, then
holds every later turn and lets the body go: the parent still completes and
gives its global slot back, which the old code (the outcome rode the next
turn) could only do once the turns went on again.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.thread_gate import ThreadGate
from tidegate import App, Context, RunQueueConfig, RunStatus
from tidegate.domain.model import CycleRequest

from .conftest import event_types, wait_status, wait_until

LOOP_STORE_THREAD = "tidegate-db"  # worker/bridge.py: the loop's store calls run there


class HeldTurns:
    """Wraps `Store.cycle`: once a loop turn has recorded the start of attempt 2+ of `parent_id`, later
    loop turns wait for `release`; a cycle from any other thread runs (and `fail_direct` makes the
    first of those that reports an outcome raise)."""

    def __init__(self, cycle: Callable[..., Any], fail_direct: bool = False) -> None:
        self._cycle = cycle
        self.parent_id = ""
        self.holding = threading.Event()
        self.release = threading.Event()
        self.fail_direct = fail_direct
        self.direct_failures = 0

    def __call__(self, request: CycleRequest) -> Any:
        loop_turn = threading.current_thread().name.startswith(LOOP_STORE_THREAD)
        if loop_turn and self.holding.is_set():
            self.release.wait(60)
        elif not loop_turn and request.outcomes and self.fail_direct and not self.direct_failures:
            self.direct_failures += 1
            raise ConnectionError("injected: the store is unreachable")
        result = self._cycle(request)
        if loop_turn and any(run_id == self.parent_id and attempt > 1 for run_id, attempt in request.starts):
            self.holding.set()
        return result


@pytest.fixture
def capped_app(database_url: str, clock: Any) -> Iterator[App]:
    application = App(database_url, run_queue=RunQueueConfig(max_concurrent_runs=2), clock=clock)
    try:
        yield application
    finally:
        application.close()


def _parent_tasks(app: App, resumed_body: ThreadGate) -> None:
    """Parents waiting on two children; a resumed attempt's body waits for `resumed_body` first."""

    @app.task(name="double", queue="kids")
    def double(n: int) -> int:
        return 2 * n

    @app.task(name="parent", queue="parents")
    def parent(ctx: Context) -> int:
        if ctx.attempt > 1:
            resumed_body.wait(60)
        return sum(ctx.batch_trigger_and_wait(double, [{"n": 1}, {"n": 2}]))

    @app.task(name="parent_async", queue="parents")
    async def parent_async(ctx: Context) -> int:
        if ctx.attempt > 1:
            await resumed_body.wait_async(60)
        return sum(await ctx.batch_trigger_and_wait_async(double, [{"n": 1}, {"n": 2}]))


@pytest.mark.parametrize("task", ["parent", "parent_async"])
def test_a_replay_only_attempt_completes_and_frees_its_slot_without_another_turn(
    capped_app: App, start_worker: Callable[..., Any], monkeypatch: pytest.MonkeyPatch, task: str
) -> None:
    app = capped_app
    resumed_body = ThreadGate()
    _parent_tasks(app, resumed_body)
    held = HeldTurns(app.store.cycle)
    monkeypatch.setattr(app.store, "cycle", held)
    handle = app.tasks[task].submit()
    held.parent_id = handle.id
    start_worker(app, max_workers=2, queues=["parents", "kids"])
    try:
        wait_until(held.holding.is_set, message="the resumed parent's start to be recorded")
        resumed_body.set()  # the loop's turns are held now: only the attempt's own report can complete it
        wait_status(app, handle.id, RunStatus.COMPLETED, timeout=20)
        assert handle.wait(timeout=5) == 6  # completed already: answered at once
        assert [h.holder for h in app.store.scope_holders("global")] == []
        types = event_types(app, handle.id)
        assert types[types.index("RunResumed") :].count("RunStarted") == 1
        assert types.count("RunCompleted") == 1
    finally:
        held.release.set()


def test_a_replay_only_outcome_the_store_refused_goes_with_the_next_turn(
    capped_app: App, start_worker: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    app = capped_app
    resumed_body = ThreadGate()
    resumed_body.set()
    _parent_tasks(app, resumed_body)
    held = HeldTurns(app.store.cycle, fail_direct=True)
    monkeypatch.setattr(app.store, "cycle", held)
    handle = app.tasks["parent"].submit()
    held.parent_id = handle.id
    held.release.set()  # turns go on: the refused outcome must reach the store through one of them
    start_worker(app, max_workers=2, queues=["parents", "kids"])
    assert handle.wait(timeout=30) == 6
    assert held.direct_failures == 1
    types = event_types(app, handle.id)
    assert types[types.index("RunResumed") :].count("RunStarted") == 1 and types.count("RunCompleted") == 1
    assert [h.holder for h in app.store.scope_holders("global")] == []
