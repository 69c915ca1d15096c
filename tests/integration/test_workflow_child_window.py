"""`wf.map_children(..., concurrency=k)` keeps a sliding window of k children (issue 13, item 7),
both adapters: as soon as one child ends, the next item's child is triggered, so a long child
holds one place of the window, not the whole window (batch refills would wait for it).

The long child is item 0, held on a gate file; no assertion depends on timing."""

from __future__ import annotations

import pytest

from tests.apps.child_window import make_app
from tests.apps.gates import max_overlap
from tests.apps.steplog import intervals, read_log
from tidegate import Executor, RunFailed, RunStatus, Workflow

from .conftest import event_types, wait_until


@pytest.fixture
def window_app(database_url):
    with make_app(database_url) as app:
        yield app


def _stored_spans(children) -> list[tuple[float, float]]:
    """Each child's time in flight as the store has it: from its trigger to its end."""
    return [(child.submitted_at.timestamp(), child.finished_at.timestamp()) for child in children]


def test_the_window_slides_past_a_long_child(window_app, start_worker, tmp_path):
    app = window_app
    log, gate = tmp_path / "children.log", tmp_path / "gate"
    flow = app.tasks["window.flow"]
    handle = flow.submit(items=5, concurrency=2, log=str(log), gate=str(gate), seconds=0.0)
    start_worker(app, max_workers=4, queues=["etl", "loads"])

    def others_completed_while_item_0_runs() -> bool:
        children = app.store.run_children(handle.id)
        done = {child.index for child in children if child.status is RunStatus.COMPLETED}
        started = {n for kind, _, n, _ in read_log(log) if kind == "start"}
        return 0 in started and {1, 2, 3, 4} <= done

    # With refills of whole batches, item 2 would wait for item 0, which waits for the gate.
    wait_until(others_completed_while_item_0_runs, timeout=30, message="items 1-4 to complete while item 0 is held")
    first = app.store.run_children(handle.id)[0]
    assert first.index == 0 and first.status is RunStatus.RUNNING  # held on the gate: it cannot end before it
    gate.touch()
    assert handle.wait(timeout=60) == [0, 10, 20, 30, 40]

    children = app.store.run_children(handle.id)
    assert [child.index for child in children] == [0, 1, 2, 3, 4]  # one child per item, in item order
    records = [app.run(child.id).info() for child in children]
    assert all(record.status is RunStatus.COMPLETED for record in records)
    assert max_overlap(_stored_spans(records)) <= 2  # never more than k children in flight
    assert max_overlap(intervals(read_log(log), "item")) <= 2  # nor executing
    assert "RunWaiting" in event_types(app, handle.id)  # it waited holding no worker meanwhile


def test_a_failed_child_in_a_sliding_window_fails_the_step(app, start_worker):
    @app.task(name="t.maybe", queue="loads")
    def maybe(n: int) -> int:
        if n == 1:
            raise ValueError("item one")
        return n

    @app.workflow(name="t.window_fails", queue="etl", executor=Executor.in_process())
    def flow(wf: Workflow):
        return wf.map_children(maybe, [0, 1, 2, 3], concurrency=2)

    handle = flow.submit()
    start_worker(max_workers=3, queues=["etl", "loads"])
    with pytest.raises(RunFailed) as failed:
        handle.wait(timeout=60)
    assert "child.t.maybe" in failed.value.error and "ValueError: item one" in failed.value.error
    assert [child.index for child in app.store.run_children(handle.id)] == [0, 1, 2, 3]
