"""The reference's three situations of waits and slots, end to end on both adapters (issue 13).

1. Environment limit 1, parent and child on different queues: the child runs
   while its parent waits (the parent released the environment slot), and
   another run of the parent's queue still waits for the parent's queue slot.
2. Parent and child on one queue of limit 1: the child runs (the parent
   released its queue slot too).
3. A chain of same-queue waits deeper than the queue's limit fails at once
   with RecursiveWaitDeadlock, naming the chain; nothing hangs.
"""

from __future__ import annotations

import threading
import time

import pytest

from tidegate import App, Concurrency, Context, RecursiveWaitDeadlock, RunFailed, RunQueueConfig, RunStatus

from .conftest import wait_status


@pytest.fixture
def make_app(database_url, clock):
    """Apps closed after the test's workers stopped (set up before `start_worker`, torn down after)."""
    apps: list[App] = []

    def make(**queues: int) -> App:
        app = App(database_url, run_queue=RunQueueConfig(max_concurrent_runs=1), clock=clock)
        for name, limit in queues.items():
            app.queue(name, concurrency=Concurrency(global_limit=limit))
        apps.append(app)
        return app

    yield make
    for app in apps:
        app.close()


def test_a_child_on_another_queue_runs_while_its_parent_keeps_its_queue_slot(make_app, start_worker):
    app = make_app(parents=1, kids=5)
    release = threading.Event()
    try:

        @app.task(name="kid", queue="kids")
        def kid() -> str:
            release.wait(30)
            return "done"

        @app.task(name="parent", queue="parents")
        def parent(ctx: Context) -> str:
            return str(ctx.trigger_and_wait(kid))

        first = parent.submit()
        start_worker(app, max_workers=4, queues=["parents", "kids"])
        wait_status(app, first.id, RunStatus.WAITING)
        (child,) = app.store.run_children(first.id)
        wait_status(app, child.id, RunStatus.RUNNING)  # environment limit 1: the parent released it
        second = parent.submit()
        time.sleep(0.3)  # a few claim turns: the second parent must not start
        assert second.status() is RunStatus.QUEUED  # the parent's queue slot is still taken
        assert [h.holder for h in app.store.scope_holders("queue:parents")] == [first.id]
        release.set()
        assert first.wait(timeout=30) == "done"
        assert second.wait(timeout=30) == "done"
    finally:
        release.set()


def test_a_child_on_its_parents_queue_of_limit_one_runs(make_app, start_worker):
    app = make_app(shared=1)

    @app.task(name="kid", queue="shared")
    def kid() -> int:
        return 7

    @app.task(name="parent", queue="shared")
    def parent(ctx: Context) -> int:
        return int(ctx.trigger_and_wait(kid)) + 1

    handle = parent.submit()
    start_worker(app, max_workers=2, queues=["shared"])
    assert handle.wait(timeout=30) == 8
    waiting = next(e for e in app.store.run_events(handle.id) if e.type == "RunWaiting")
    assert waiting.metadata["released"] == ["global", "queue:shared"]


def test_a_chain_deeper_than_the_queue_limit_fails_at_once_with_the_chain(make_app, start_worker):
    app = make_app(shared=1)

    @app.task(name="nest", queue="shared")
    def nest(ctx: Context, depth: int) -> int:
        if depth == 0:
            return 0
        try:
            return int(ctx.trigger_and_wait(nest, depth=depth - 1)) + 1
        except RecursiveWaitDeadlock as error:
            return -len(error.chain)  # raised from the trigger call, in the parent

    handle = nest.submit(depth=3)
    start_worker(app, max_workers=2, queues=["shared"])
    result = handle.wait(timeout=60)  # a generous deadline: it only catches a hang
    assert result == -2 + 1  # the child's wait on a grandchild was refused (at once: nothing was triggered)
    (child,) = app.store.run_children(handle.id)
    assert app.store.run_children(child.id) == []  # the refused wait stored nothing


def test_an_uncaught_deadlock_fails_the_refused_run_with_its_code_and_chain(make_app, start_worker):
    app = make_app(shared=1)

    @app.task(name="nest", queue="shared")
    def nest(ctx: Context, depth: int) -> int:
        return 0 if depth == 0 else int(ctx.trigger_and_wait(nest, depth=depth - 1)) + 1

    handle = nest.submit(depth=2)
    start_worker(app, max_workers=2, queues=["shared"])
    try:
        handle.wait(timeout=30)
    except RunFailed as error:
        assert "RECURSIVE_WAIT_DEADLOCK" in error.error
        (child,) = app.store.run_children(handle.id)
        assert f"{handle.id} -> {child.id}" in error.error
    else:
        raise AssertionError("the chain should have been refused")
