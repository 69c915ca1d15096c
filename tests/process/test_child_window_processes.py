"""A worker SIGKILLed mid-window of `wf.map_children` (issue 13, item 7): every item still gets
exactly one child run, and the window never has more than k children in flight.

Worker processes run `tests.apps.child_window:app`: item 0's child holds on a gate file while
the others take 0.2 s each through the rest of the window, so the kill lands while the
workflow slides its window (waiting on a child, resuming, or triggering the next one)."""

from __future__ import annotations

from collections import Counter

import pytest

from tests.apps.child_window import make_app
from tests.apps.gates import max_overlap
from tests.apps.steplog import intervals, read_log
from tidegate import RunStatus

from .conftest import wait_until

pytestmark = pytest.mark.slow

ITEMS = 8
WINDOW = 3


def test_sigkill_mid_window_leaves_exactly_one_child_per_item(database_url, worker_processes, tmp_path):
    log, gate = tmp_path / "children.log", tmp_path / "gate"
    env = {"TIDEGATE_LEASE_DURATION": "1s"}
    with make_app(database_url) as app:
        flow = app.tasks["window.flow"]
        run = flow.submit(items=ITEMS, concurrency=WINDOW, log=str(log), gate=str(gate), seconds=0.2)
        first = worker_processes.spawn("tests.apps.child_window:app", database_url, max_workers=4, env=env)

        def mid_window() -> bool:
            ended = {n for kind, _, n, _ in read_log(log) if kind == "end"}
            started = {n for kind, _, n, _ in read_log(log) if kind == "start"}
            return 0 in started and len(ended) >= 2

        wait_until(mid_window, timeout=60, message="item 0 held while two others ended")
        worker_processes.kill(first)
        gate.touch()
        second = worker_processes.spawn("tests.apps.child_window:app", database_url, max_workers=4, env=env)
        try:
            assert run.wait(timeout=120) == [n * 10 for n in range(ITEMS)]
        except Exception:
            pytest.fail(worker_processes.output(second))

        children = app.store.run_children(run.id)
        assert [child.index for child in children] == list(range(ITEMS))  # one child per item, no gap
        records = [app.run(child.id).info() for child in children]
        assert all(record.status is RunStatus.COMPLETED for record in records)
        spans = [(record.submitted_at.timestamp(), record.finished_at.timestamp()) for record in records]
        assert max_overlap(spans) <= WINDOW  # the store never had more than k children in flight
        entries = read_log(log)
        ended = Counter(n for kind, _, n, _ in entries if kind == "end")
        assert set(ended) == set(range(ITEMS))  # each item's child ran to its end
        assert max_overlap(intervals(entries, "item")) <= WINDOW
