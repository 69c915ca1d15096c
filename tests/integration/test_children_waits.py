"""Child runs and durable waits, end to end on both adapters (issue 13).

A parent that waits holds no worker: one worker of capacity 1 completes a
parent waiting on children in turn. A resumed parent replays its function and
each earlier trigger is answered from the store (each child runs once).
"""

from __future__ import annotations

import time

import pytest

from tidegate import App, Context, NonDeterministicReplay, RunFailed, RunStatus

from .conftest import event_types, wait_status


def _count(app: App, task: str) -> int:
    return sum(1 for run in app.store.page_runs(limit=1000) if run.task == task)


def test_one_worker_of_capacity_one_completes_a_parent_waiting_on_three_children_in_turn(app, start_worker):
    calls: list[str] = []

    @app.task(name="double", queue="kids")
    def double(n: int) -> int:
        calls.append(f"double {n}")
        return 2 * n

    @app.task(name="parent", queue="parents")
    def parent(ctx: Context) -> int:
        total = 0
        for n in (1, 2, 3):
            total += ctx.trigger_and_wait(double, n=n)
        return total

    handle = parent.submit()
    start_worker(max_workers=1, queues=["parents", "kids"])
    assert handle.wait(timeout=30) == 12
    assert sorted(calls) == ["double 1", "double 2", "double 3"]  # each child once, though the parent replayed
    types = event_types(app, handle.id)
    assert types.count("RunWaiting") == 3 and types.count("RunResumed") == 3
    assert types.count("ChildTriggered") == 3
    info = handle.info()
    assert info.attempt == 4 and info.max_attempts == 4  # three waits did not use up its one attempt
    children = app.store.run_children(handle.id)
    assert [child.index for child in children] == [0, 1, 2]
    assert all(app.store.get_run(child.id).parent_id == handle.id for child in children)
    assert all(app.store.get_run(child.id).depth == 1 for child in children)


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_every_attempt_that_ran_has_its_start_once_before_what_it_did(app, start_worker, asynchronous):
    """A trigger runs before the worker's next turn reports the attempt's start; a wait then ends
    the attempt, and the start reported after it used to match nothing: attempts 1 to 3 had no
    RunStarted. Each attempt's start is recorded once, ahead of its ChildTriggered and RunWaiting."""

    @app.task(name="double", queue="kids")
    def double(n: int) -> int:
        return 2 * n

    @app.task(name="parent", queue="parents")
    def parent(ctx: Context) -> int:
        return sum(ctx.trigger_and_wait(double, n=n) for n in (1, 2, 3))

    @app.task(name="parent_async", queue="parents")
    async def parent_async(ctx: Context) -> int:
        return sum([await ctx.trigger_and_wait_async(double, n=n) for n in (1, 2, 3)])

    handle = (parent_async if asynchronous else parent).submit()
    start_worker(max_workers=1, queues=["parents", "kids"])
    assert handle.wait(timeout=30) == 12
    story = [
        (event.type, event.metadata.get("attempt"))
        for event in app.store.run_events(handle.id)
        if event.type in ("RunStarted", "ChildTriggered", "RunWaiting", "RunCompleted")
    ]
    expected = []
    for attempt in (1, 2, 3):  # each replays the children before and waits on the next
        expected += [("RunStarted", attempt), ("ChildTriggered", None), ("RunWaiting", attempt)]
    assert story == [*expected, ("RunStarted", 4), ("RunCompleted", 4)]


def test_batch_wait_and_fire_and_forget(app, start_worker):
    @app.task(name="square", queue="kids")
    def square(n: int) -> int:
        return n * n

    @app.task(name="note", queue="kids")
    def note(text: str) -> str:
        return text

    @app.task(name="parent", queue="parents")
    def parent(ctx: Context) -> list[int]:
        ctx.trigger(note, text="started")
        return ctx.batch_trigger_and_wait(square, [{"n": n} for n in range(5)])

    handle = parent.submit()
    start_worker(max_workers=2, queues=["parents", "kids"])
    assert handle.wait(timeout=30) == [0, 1, 4, 9, 16]
    assert _count(app, "note") == 1 and _count(app, "square") == 5


def test_a_failed_child_raises_in_its_parent(app, start_worker):
    @app.task(name="broken", queue="kids")
    def broken() -> None:
        raise ValueError("no good")

    @app.task(name="parent", queue="parents")
    def parent(ctx: Context) -> str:
        try:
            ctx.trigger_and_wait(broken)
        except RunFailed as error:
            return f"child failed: {error.error.splitlines()[0]}"
        return "no error"

    handle = parent.submit()
    start_worker(max_workers=1, queues=["parents", "kids"])
    assert handle.wait(timeout=30) == "child failed: ValueError: no good"


def test_an_async_parent_waits_too(app, start_worker):
    @app.task(name="double", queue="kids")
    def double(n: int) -> int:
        return 2 * n

    @app.task(name="parent", queue="parents")
    async def parent(ctx: Context) -> int:
        return await ctx.trigger_and_wait_async(double, n=21)

    handle = parent.submit()
    start_worker(max_workers=1, queues=["parents", "kids"])
    assert handle.wait(timeout=30) == 42


def test_a_replay_asking_for_another_child_is_a_clear_error(app, start_worker):
    attempts: list[int] = []

    @app.task(name="echo", queue="kids")
    def echo(n: int) -> int:
        return n

    @app.task(name="parent", queue="parents")
    def parent(ctx: Context) -> int:
        attempts.append(ctx.attempt)
        return ctx.trigger_and_wait(echo, n=len(attempts))  # different args on the replay

    handle = parent.submit()
    start_worker(max_workers=1, queues=["parents", "kids"])
    with pytest.raises(RunFailed) as raised:
        handle.wait(timeout=30)
    assert "NonDeterministicReplay" in raised.value.error
    assert "echo" in raised.value.error and _count(app, "echo") == 1
    assert NonDeterministicReplay.code == "NON_DETERMINISTIC_REPLAY"


def test_cancelling_a_waiting_parent_cancels_its_children_unless_abandoned(app, start_worker):
    @app.task(name="slow", queue="kids")
    def slow(ctx: Context) -> None:
        ctx.wait_cancelled_sync(30)

    @app.task(name="queued_child", queue="idle")
    def queued_child() -> None:
        pass  # never runs: no worker serves its queue

    @app.task(name="parent", queue="parents")
    def parent(ctx: Context) -> None:
        ctx.trigger(queued_child, on_parent_cancel="abandon")
        ctx.batch_trigger_and_wait(slow, [{}])

    handle = parent.submit()
    start_worker(max_workers=2, queues=["parents", "kids"])
    wait_status(app, handle.id, RunStatus.WAITING)
    children = app.store.run_children(handle.id)
    kept, running = children
    wait_status(app, running.id, RunStatus.RUNNING)
    assert handle.cancel() is RunStatus.CANCELED
    wait_status(app, running.id, RunStatus.CANCELED)
    assert app.store.get_run(kept.id).status is RunStatus.QUEUED  # abandoned: left to run
    assert app.store.scope_usage() == {} or all(v == 0 for v in app.store.scope_usage().values())


def test_a_parents_timeout_measures_its_execution_not_its_wait(app, start_worker):
    @app.task(name="slow", queue="kids")
    def slow() -> str:
        time.sleep(1.5)
        return "slow"

    @app.task(name="parent", queue="parents", timeout="1s")
    def parent(ctx: Context) -> str:
        return str(ctx.trigger_and_wait(slow))

    handle = parent.submit()
    start_worker(max_workers=2, queues=["parents", "kids"])
    assert handle.wait(timeout=30) == "slow"  # waited 1.5 s with a 1 s timeout: the wait is not execution


def test_children_take_submit_options_and_not_their_parents_queue_unless_asked(app, start_worker):
    @app.task(name="kid", queue="kids")
    def kid(n: int) -> int:
        return n

    @app.task(name="parent", queue="parents")
    def parent(ctx: Context) -> list[str]:
        plain = ctx.trigger(kid, n=0)
        tuned = ctx.trigger(kid.options(queue=ctx.queue, priority=5, tags={"team": "a"}, concurrency_key="k"), n=1)
        return [plain, tuned]

    handle = parent.submit()
    start_worker(max_workers=2, queues=["parents", "kids"])
    plain, tuned = (app.store.get_run(run_id) for run_id in handle.wait(timeout=30))
    assert plain.queue == "kids" and plain.priority == 0 and plain.tags == {}
    assert (tuned.queue, tuned.priority, tuned.tags, tuned.concurrency_key) == ("parents", 5, {"team": "a"}, "k")
    assert plain.parent_id == tuned.parent_id == handle.id
