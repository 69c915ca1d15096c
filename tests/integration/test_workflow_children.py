"""Workflows with child runs (issue 13 item 7), both adapters: `wf.child` and `wf.map_children`
are steps whose output is a child's result; while only child waits are outstanding the run
waits holding no worker, and its resumed attempt reads the children's results back."""

from __future__ import annotations

import pytest

from tidegate import Executor, RunFailed, RunStatus, Workflow

from .conftest import event_types


def test_the_issue_example_waits_on_its_children_and_publishes(tidegate_app, tidegate_drain):
    app = tidegate_app
    loaded: list[str] = []

    @app.task(name="load_day", queue="loads")
    def load_day(day: str) -> int:
        loaded.append(day)
        return int(day[-2:])

    @app.step()
    def publish(loads: list[int], extra: int) -> int:
        return sum(loads) + extra

    @app.task(name="bonus", queue="loads")
    def bonus(n: int) -> int:
        return n

    @app.workflow(name="t.nightly_children", queue="etl", executor=Executor.in_process())
    def nightly(wf: Workflow, days: list[str]):
        loads = wf.map_children(load_day, days, concurrency=2)
        extra = wf.child(bonus, n=100)
        return wf.step(publish, loads, extra)

    days = [f"2026-01-{d:02d}" for d in range(1, 6)]
    handle = nightly.submit(days=days)
    ran = tidegate_drain(app, max_workers=1)  # one slot: the waits hold no worker
    assert handle.info().result == 1 + 2 + 3 + 4 + 5 + 100
    assert ran.completed == 7 and ran.attempts[0] == (handle.id, 1) and len(ran.of(nightly)) == 1
    assert sorted(loaded) == days  # each child ran once, across every resume
    children = app.store.run_children(handle.id)
    assert len(children) == 6 and all(child.status is RunStatus.COMPLETED for child in children)
    types = event_types(app, handle.id)
    assert "RunWaiting" in types and "RunResumed" in types


def test_a_failed_child_fails_its_step_and_the_run(tidegate_app, tidegate_drain):
    app = tidegate_app

    @app.task(name="broken", queue="loads")
    def broken() -> None:
        raise ValueError("nope")

    @app.workflow(name="t.broken_child", queue="etl", executor=Executor.in_process())
    def flow(wf: Workflow):
        return wf.child(broken)

    handle = flow.submit()
    assert tidegate_drain(app).failed == 2  # the child, then the workflow
    with pytest.raises(RunFailed) as failed:
        handle.wait(timeout=0)
    assert "child.broken" in failed.value.error and "ValueError: nope" in failed.value.error
