"""Workflow runs across worker processes: a window that survives a move, slots that survive a SIGKILL.

Worker processes run `tests/apps/run_worker.py tests.apps.workflows:app`;
steps log `start|end|abandoned <step> <n> <t>` to a side file
(`tests.apps.steplog`), from which the tests compute how many items were in
flight at once and how often each one ran.
"""

from __future__ import annotations

import os
import random
import signal
from collections import Counter

import pytest

from tests.apps.gates import max_overlap
from tests.apps.steplog import intervals, read_log
from tests.apps.workflows import HELD_POOL, make_app
from tidegate import RunStatus
from tidegate.domain.steps import StepStatus

from .conftest import wait_until

pytestmark = pytest.mark.slow

ITEMS = 200
WINDOW = 7


def _stop_gracefully(worker_processes, process) -> None:
    os.kill(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=60)
    except Exception:
        pytest.fail("the worker did not stop on SIGTERM:\n" + worker_processes.output(process))


def test_a_window_of_200_items_holds_across_a_move_between_workers(database_url, worker_processes, tmp_path):
    log = tmp_path / "steps.log"
    rng = random.Random(7)
    durations = [round(rng.uniform(0.02, 0.08), 3) for _ in range(ITEMS)]
    env = {"TIDEGATE_SHUTDOWN_GRACE": "100ms", "TIDEGATE_LEASE_DURATION": "5s"}
    with make_app(database_url) as app:
        run = app.tasks["wf.window"].submit(log=str(log), durations=durations, concurrency=WINDOW)
        first = worker_processes.spawn("tests.apps.workflows:app", database_url, max_workers=2, env=env)
        wait_until(
            lambda: sum(1 for kind, *_ in read_log(log) if kind == "end") >= 30,
            60,
            message="the first worker to complete 30 items",
        )
        _stop_gracefully(worker_processes, first)  # hands the run back mid-map
        moved_at = max(at for *_, at in read_log(log))
        record = run.info()
        assert record.status is RunStatus.QUEUED, (record.status, worker_processes.output(first))
        requeued = [e for e in app.store.run_events(run.id) if e.type == "RunRequeued"]
        assert [e.metadata.get("reason") for e in requeued] == ["worker shutting down"]
        done_before = {s.item_index for s in app.store.run_steps(run.id) if s.status is StepStatus.COMPLETED}
        assert 30 <= len(done_before) < ITEMS

        second = worker_processes.spawn("tests.apps.workflows:app", database_url, max_workers=2, drain=True, env=env)
        assert run.wait(timeout=120) == [n * n for n in range(ITEMS)]  # every item's output, once, in order
        second.wait(timeout=60)

    entries = read_log(log)
    starts = Counter(n for kind, step, n, _ in entries if kind == "start")
    ends = Counter(n for kind, step, n, _ in entries if kind == "end")
    abandoned = {n for kind, step, n, _ in entries if kind == "abandoned"}
    assert set(starts) == set(range(ITEMS)) and all(ends[n] >= 1 for n in range(ITEMS))
    assert all(starts[n] == 1 for n in done_before)  # completed before the move: never run again
    assert abandoned and all(starts[n] == 2 for n in abandoned)  # in flight at the move: run again
    # Only items in flight at the move ran twice (one may have ended just before its output was
    # recorded: at-least-once); there are at most a window of them.
    twice = {n for n in range(ITEMS) if starts[n] > 1}
    assert all(starts[n] <= 2 for n in range(ITEMS)) and abandoned <= twice and len(twice) <= WINDOW
    spans = intervals(entries, "item", open_until=moved_at)
    assert max_overlap(spans) <= WINDOW  # across both workers and the move
    assert max_overlap(spans) >= WINDOW - 2  # and the window was used


def test_a_sigkilled_workers_pool_slots_come_back_and_its_completed_steps_are_not_rerun(
    database_url, worker_processes, tmp_path
):
    log = tmp_path / "steps.log"
    marker = tmp_path / "hold-on"
    marker.write_text("the first worker's steps hold their slots until it is killed")
    env = {"TIDEGATE_LEASE_DURATION": "1s"}
    with make_app(database_url) as app:
        app.set_pool_limit(HELD_POOL, 2, lease_duration="1s")
        run = app.tasks["wf.held"].submit(log=str(log), marker=str(marker), jobs=4)
        first = worker_processes.spawn("tests.apps.workflows:app", database_url, max_workers=2, env=env)
        wait_until(lambda: len(app.store.pool_holders(HELD_POOL)) == 2, 60, message="two steps holding the pool")
        wait_until(lambda: sum(1 for e in read_log(log) if e[:2] == ("start", "hold")) == 2, 30, message="two holds")
        worker_processes.kill(first)
        killed_at = max(at for *_, at in read_log(log))
        held = app.store.pool_holders(HELD_POOL)
        assert len(held) == 2 and all(h.run_id == run.id for h in held)  # a dead worker's slots: still claimed
        marker.unlink()

        def swept() -> bool:  # once the leases lapse the sweeper frees the slots and re-queues the run
            app.store.sweep("test-sweeper", 0.1)
            return not app.store.pool_holders(HELD_POOL) and run.status() is RunStatus.QUEUED

        wait_until(swept, 30, 0.2, message="the pool slots and the run to be freed by the sweeper")
        second = worker_processes.spawn("tests.apps.workflows:app", database_url, max_workers=2, drain=True, env=env)
        assert run.wait(timeout=60) == [0, 1, 2, 3]
        second.wait(timeout=60)
        assert app.store.pool_holders(HELD_POOL) == []
        assert run.info().attempt == 2  # the rescue counted as an attempt

    entries = read_log(log)
    prepared = [e for e in entries if e[:2] == ("start", "prepare")]
    assert len(prepared) == 1  # completed before the kill: read back, not re-run
    hold_starts = Counter(n for kind, step, n, _ in entries if kind == "start" and step == "hold")
    assert sorted(hold_starts.values()) == [1, 1, 2, 2]  # the two killed holds ran again, the others once
    assert max_overlap(intervals(entries, "hold", open_until=killed_at)) <= 2


def test_a_graceful_stop_hands_back_a_workflow_whose_step_runs_in_a_pool_process(
    database_url, worker_processes, tmp_path
):
    """The step is abandoned, not recorded, and its process does not keep the worker alive."""
    log = tmp_path / "steps.log"
    with make_app(database_url) as app:
        run = app.tasks["wf.stuck"].submit(log=str(log))
        worker = worker_processes.spawn(
            "tests.apps.workflows:app", database_url, max_workers=1, env={"TIDEGATE_SHUTDOWN_GRACE": "100ms"}
        )
        wait_until(lambda: read_log(log), 60, message="the step to start in a pool process")
        os.kill(worker.pid, signal.SIGTERM)
        try:
            worker.wait(timeout=15)
        except Exception:
            pytest.fail("the worker did not exit: its pool process kept it alive\n" + worker_processes.output(worker))
        assert run.status() is RunStatus.QUEUED
        steps = app.store.run_steps(run.id)
        assert [step.step_key for step in steps] == ["stuck"]
        assert steps[0].status is not StepStatus.COMPLETED
