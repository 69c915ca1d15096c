"""Workflow runs end to end on both backends: results, checkpoints, failures, retries, windows, events."""

from __future__ import annotations

import asyncio
import logging
import threading

import pytest
from typer.testing import CliRunner

from tests.thread_gate import ThreadGate
from tidegate import Executor, RunFailed, RunStatus, Workflow
from tidegate.cli.main import app as cli
from tidegate.domain.steps import StepStatus

from .conftest import wait_until


def _steps_by_key(app, run_id):
    return {step.step_key: step for step in app.store.run_steps(run_id)}


def test_the_issue_example_runs_and_returns_the_output_of_the_returned_step(app, start_worker):
    app.set_pool_limit("database", 5, lease_duration="5m")
    calls: list[str] = []

    @app.step(pool="database", pool_slots=2)
    def heavy_query(day: str) -> int:
        calls.append(day)
        return int(day[-2:])

    @app.step(pools={"database": 1, "warehouse_api": 1})
    def publish(counts: list[int]) -> dict:
        return {"total": sum(counts), "counts": counts}

    @app.workflow(name="t.nightly", queue="etl", executor=Executor.in_process())
    def nightly(wf: Workflow, days: list[str]):
        counts = wf.map(heavy_query, days, concurrency=3)
        return wf.step(publish, counts)

    start_worker()
    days = [f"2026-11-{day:02d}" for day in range(1, 6)]
    run = nightly.submit(days=days)
    assert run.wait(timeout=60) == {"total": 15, "counts": [1, 2, 3, 4, 5]}
    assert sorted(calls) == days

    steps = _steps_by_key(app, run.id)
    assert set(steps) == {f"heavy_query[{i}]" for i in range(5)} | {"publish"}
    assert all(step.status is StepStatus.COMPLETED and step.attempt == 1 for step in steps.values())
    assert steps["heavy_query[2]"].map_key == "heavy_query" and steps["heavy_query[2]"].item_index == 2
    assert steps["publish"].output == {"total": 15, "counts": [1, 2, 3, 4, 5]}

    events = app.store.run_events(run.id)
    by_step: dict[str, list[str]] = {}
    for event in events:
        if event.step_key is not None:
            by_step.setdefault(event.step_key, []).append(event.type)
    for key in steps:
        kinds = by_step[key]
        assert kinds.index("StepSlotClaimed") < kinds.index("StepStarted") < kinds.index("StepCompleted"), kinds
    unconfigured = [e for e in events if e.type == "PoolUnconfigured"]
    assert [e.metadata.get("pool") for e in unconfigured] == ["warehouse_api"]
    assert app.store.pool_holders("database") == []  # every slot came back

    shown = CliRunner().invoke(cli, ["runs", "show", run.id, "--database", app.database])
    assert shown.exit_code == 0, shown.output
    assert "heavy_query[4]" in shown.output and "publish" in shown.output
    assert "StepSlotClaimed" in shown.output and "completed" in shown.output


def test_a_failing_step_fails_the_run_with_its_error_and_stops_the_others(app, start_worker):
    release = threading.Event()

    @app.step
    async def slow(n: int) -> int:
        await asyncio.to_thread(release.wait, 30)
        return n

    @app.step
    def boom(n: int) -> int:
        if n == 1:
            raise ValueError(f"bad item {n}")
        return n

    @app.workflow(name="t.failing", executor=Executor.parallel(max_workers=1, max_async_concurrent=4))
    def failing(wf: Workflow):
        wf.step(slow, 7)
        return wf.map(boom, [0, 1, 2], concurrency=1)

    start_worker()
    run = failing.submit()
    with pytest.raises(RunFailed) as failed:
        run.wait(timeout=60)
    release.set()
    assert failed.value.error.startswith("step boom[1] failed: ValueError: bad item 1")
    assert "Traceback" in failed.value.error  # the step's own traceback, from its process
    steps = _steps_by_key(app, run.id)
    assert steps["boom[0]"].status is StepStatus.COMPLETED
    assert steps["boom[1]"].status is StepStatus.FAILED and "bad item 1" in steps["boom[1]"].error
    assert steps["boom[2]"].status is StepStatus.PENDING  # never started: the window was held by boom[1]
    assert steps["slow"].status is not StepStatus.COMPLETED  # canceled with the run, not recorded done
    failed_events = [e for e in app.store.run_events(run.id) if e.type == "StepFailed"]
    assert [e.step_key for e in failed_events] == ["boom[1]"]


class _AskHeldUntilTheFailure(logging.Handler):
    """Seams on a store: the map's ask for an item after boom[1]'s is held until boom[1]'s failure
    is recorded (which frees its window slot) or the run stopped dispatching for it (a log record
    with `stops_dispatch`), whichever comes: the interleaving of the flake, forced."""

    def __init__(self, store) -> None:
        super().__init__(logging.INFO)
        self.asked_again = threading.Event()  # the ask after boom[1]'s is on its way
        self.settled = threading.Event()
        self.held_in_vain = False  # neither came within the bound
        self.asking = 0  # asks of the map on their way
        self.recorded_while_asked = False  # boom[1]'s failure was recorded while an ask was on its way
        self.took: list[str] = []
        self._next_map_item, self._finish_step = store.next_map_item, store.finish_step

    def next_map_item(self, fence, worker_id, map_key, window):
        self.asking += 1
        try:
            if "boom[1]" in self.took:
                self.asked_again.set()
                self.held_in_vain |= not self.settled.wait(30)  # a bound, not a timing: it comes at once
            taken = self._next_map_item(fence, worker_id, map_key, window)
        finally:
            self.asking -= 1
        if taken is not None:
            self.took.append(taken.step_key)
        return taken

    def finish_step(self, request):
        step = request.step
        if step.step_key == "boom[1]":
            self.recorded_while_asked |= self.asking > 0
        finish = self._finish_step(request)
        if step.step_key == "boom[1]" and step.status is StepStatus.FAILED:
            self.settled.set()
        return finish

    def emit(self, record: logging.LogRecord) -> None:
        if getattr(record, "stops_dispatch", False):
            self.settled.set()


def test_an_item_failing_for_good_stops_its_map_before_its_window_slot_can_be_reused(
    app, start_worker, monkeypatch, caplog
):
    """The flake behind the test above: with a window of 1 the map asks for its next item right
    after taking boom[1] (the window is full), and boom[1] fails while that ask is on its way.
    Answered after the failure freed the slot, the ask took boom[2], which started. The run must
    stop dispatching before the slot is freed: boom[2] is never taken, let alone started."""
    seams = _AskHeldUntilTheFailure(app.store)
    monkeypatch.setattr(app.store, "next_map_item", seams.next_map_item)
    monkeypatch.setattr(app.store, "finish_step", seams.finish_step)
    caplog.set_level(logging.INFO, logger="tidegate.workflow")
    logging.getLogger("tidegate.workflow").addHandler(seams)
    started: list[int] = []

    @app.step
    def boom(n: int) -> int:
        started.append(n)
        if n == 1:
            assert seams.asked_again.wait(30)
            raise ValueError(f"bad item {n}")
        return n

    @app.workflow(name="t.failing_window", executor=Executor.in_process())
    def failing(wf: Workflow):
        return wf.map(boom, [0, 1, 2], concurrency=1)

    try:
        start_worker()
        run = failing.submit()
        with pytest.raises(RunFailed) as failed:
            run.wait(timeout=60)
    finally:
        logging.getLogger("tidegate.workflow").removeHandler(seams)
    assert failed.value.error.startswith("step boom[1] failed: ValueError: bad item 1")
    assert seams.asked_again.is_set() and not seams.held_in_vain
    assert not seams.recorded_while_asked  # the failure waited for the ask's answer before freeing the slot
    assert started == [0, 1]
    assert "boom[2]" not in seams.took
    assert _steps_by_key(app, run.id)["boom[2]"].status is StepStatus.PENDING
    assert [e.step_key for e in app.store.run_events(run.id) if e.type == "StepFailed"] == ["boom[1]"]


def test_a_step_failing_for_good_hands_its_executor_slot_to_no_other_step(app, start_worker):
    """In process a run executes one step at a time: the items of a window of 3 wait for the one
    executor slot. The slot boom[0] frees as it fails went to boom[1], which started before the run
    acted on the failure; the run must stop dispatching first, so nothing after boom[0] starts."""
    started: list[int] = []

    @app.step
    def boom(n: int) -> int:
        started.append(n)
        if n == 0:
            raise ValueError("bad item 0")
        return n

    @app.workflow(name="t.failing_serial", executor=Executor.in_process())
    def failing(wf: Workflow):
        return wf.map(boom, [0, 1, 2], concurrency=3)

    start_worker()
    run = failing.submit()
    with pytest.raises(RunFailed) as failed:
        run.wait(timeout=60)
    assert failed.value.error.startswith("step boom[0] failed: ValueError: bad item 0")
    assert started == [0]
    events = app.store.run_events(run.id)
    assert [e.step_key for e in events if e.type in ("StepStarted", "StepFailed")] == ["boom[0]", "boom[0]"]


def test_a_step_failing_for_good_hands_its_pool_slot_to_no_other_step(app, start_worker):
    """Three steps of a run wait for a pool of 1. The first to hold it fails once the other two
    wait; the store used to grant its freed slot to the next one, which started before the run
    acted on the failure. The run stops dispatching first: only the failed step ever started."""
    app.set_pool_limit("db", 1, lease_duration="5m")
    others_waiting = ThreadGate()
    started: list[int] = []

    @app.step(pool="db")
    async def query(n: int) -> int:
        started.append(n)
        if len(started) == 1:
            assert await others_waiting.wait_async(60)
            raise ValueError(f"bad query {n}")
        return n

    @app.workflow(name="t.failing_pool", executor=Executor.parallel(max_async_concurrent=3))
    def failing(wf: Workflow):
        for n in range(3):
            wf.step(query, n)

    start_worker()
    run = failing.submit()

    def waiting() -> int:
        return next((pool.pending for pool in app.store.pools() if pool.name == "db"), 0)

    wait_until(lambda: waiting() == 2, message="two steps waiting")
    others_waiting.set()
    with pytest.raises(RunFailed) as failed:
        run.wait(timeout=60)
    assert len(started) == 1, started
    assert failed.value.error.startswith("step query") and f"failed: ValueError: bad query {started[0]}\n" in (
        failed.value.error
    )
    assert [e.type for e in app.store.run_events(run.id)].count("StepStarted") == 1


def test_a_step_retry_that_succeeds_lets_the_run_complete(app, start_worker):
    tries: list[int] = []

    @app.step(max_attempts=3, retry_backoff="10ms")
    def flaky(n: int) -> int:
        tries.append(n)
        if len(tries) < 3:
            raise ConnectionError("try again")
        return n * 2

    @app.workflow(name="t.flaky")
    def retried(wf: Workflow):
        return wf.step(flaky, 21)

    start_worker()
    run = retried.submit()
    assert run.wait(timeout=60) == 42
    assert len(tries) == 3
    kinds = [e.type for e in app.store.run_events(run.id) if e.step_key == "flaky"]
    assert kinds.count("StepFailed") == 2 and kinds[-1] == "StepCompleted"
    assert _steps_by_key(app, run.id)["flaky"].status is StepStatus.COMPLETED


def test_a_retried_run_reads_completed_steps_back_instead_of_running_them_again(app, start_worker):
    runs: dict[str, int] = {"extract": 0, "load": 0}

    @app.step
    def extract(source: str) -> list[int]:
        runs["extract"] += 1
        return [1, 2, 3]

    @app.step
    def double(n: int) -> int:
        return n * 2

    @app.step
    def load(rows: list[int]) -> int:
        runs["load"] += 1
        if runs["load"] == 1:
            raise RuntimeError("warehouse down")
        return sum(rows)

    @app.workflow(name="t.etl", max_attempts=2, retry_backoff="10ms")
    def etl(wf: Workflow, source: str):
        rows = wf.step(extract, source)
        doubled = wf.map(double, rows)  # expanded once extract's output is known
        return wf.step(load, doubled)

    start_worker()
    run = etl.submit(source="s3://bucket")
    assert run.wait(timeout=60) == 12
    assert runs == {"extract": 1, "load": 2}  # attempt 2 read extract's checkpoint back
    steps = _steps_by_key(app, run.id)
    assert steps["extract"].attempt == 1 and steps["load"].attempt == 2
    assert [steps[f"double[{i}]"].output for i in range(3)] == [2, 4, 6]
    assert run.info().attempt == 2


def test_a_sliding_window_starts_each_next_item_as_one_completes(app, start_worker):
    started: list[int] = []
    done = {n: ThreadGate() for n in range(5)}

    @app.step
    async def item(n: int) -> int:
        started.append(n)
        assert await done[n].wait_async(60)
        return n

    @app.workflow(name="t.window", executor=Executor.parallel(max_async_concurrent=10))
    def window(wf: Workflow):
        return wf.map(item, list(range(5)), concurrency=3)

    worker = start_worker()
    run = window.submit()
    wait_until(lambda: len(started) >= 3, message="the first three items")

    def window_full() -> bool:
        """Ask the store for the next item as the run's own worker would: refused while the window is full."""
        return app.store.next_map_item((run.id, 1), worker.id, "item", 3) is None

    assert window_full() and started == [0, 1, 2]  # nothing else starts
    done[1].set()
    wait_until(lambda: len(started) >= 4, message="the item after 1's completion")
    assert window_full() and started == [0, 1, 2, 3]  # exactly the next item, no more
    done[0].set()
    wait_until(lambda: len(started) >= 5, message="the item after 0's completion")
    assert started == [0, 1, 2, 3, 4]
    for event in done.values():
        event.set()
    assert run.wait(timeout=30) == [0, 1, 2, 3, 4]


def test_async_steps_stay_within_max_async_concurrent(app, start_worker):
    active: list[int] = []
    peak: list[int] = []

    @app.step
    async def nap(n: int) -> int:
        active.append(n)
        peak.append(len(active))
        await asyncio.sleep(0.2)
        active.remove(n)
        return n

    @app.workflow(name="t.naps", executor=Executor.parallel(max_async_concurrent=3))
    def naps(wf: Workflow):
        return wf.map(nap, list(range(9)))

    start_worker()
    assert naps.submit().wait(timeout=30) == list(range(9))
    assert max(peak) == 3


def test_misuse_fails_the_run_with_a_clear_error(app, start_worker):
    def not_a_step(x: int) -> int:
        return x

    @app.step
    def wants_list(items: list) -> int:
        return len(items)

    @app.step
    def scalar() -> int:
        return 5

    @app.workflow(name="t.misused")
    def misused(wf: Workflow):
        return wf.step(not_a_step, 1)

    @app.workflow(name="t.map_of_scalar")
    def map_of_scalar(wf: Workflow):
        return wf.map(wants_list, wf.step(scalar))

    start_worker()
    with pytest.raises(RunFailed, match=r"not_a_step is not a step: decorate it with @app\.step"):
        misused.submit().wait(timeout=30)
    with pytest.raises(RunFailed, match=r"wf.map\(wants_list\) needs a list of items, got int"):
        map_of_scalar.submit().wait(timeout=30)


def test_a_canceled_workflow_stops_its_steps(app, start_worker, monkeypatch):
    monkeypatch.setenv("TIDEGATE_CANCEL_GRACE", "300ms")  # the steps ignore the cancel: stopped at the grace
    started = threading.Event()
    finished: list[int] = []

    @app.step
    async def forever(n: int) -> int:
        started.set()
        await asyncio.sleep(60)
        finished.append(n)
        return n

    @app.workflow(name="t.forever", executor=Executor.parallel(max_async_concurrent=2))
    def long_running(wf: Workflow):
        return wf.map(forever, [1, 2])

    start_worker()
    run = long_running.submit()
    assert started.wait(30)
    run.cancel()
    with pytest.raises(RunFailed, match="canceled"):
        run.wait(timeout=10)
    assert run.status() is RunStatus.CANCELED
    assert finished == []
    assert all(step.status is not StepStatus.COMPLETED for step in app.store.run_steps(run.id))


def test_a_canceled_workflow_lets_running_steps_finish_and_starts_no_more(app, start_worker, monkeypatch):
    # A grace far beyond the wait below: a run that waited for it, not for its running items, fails
    # the wait (WaitTimeout) whatever the machine's speed.
    monkeypatch.setenv("TIDEGATE_CANCEL_GRACE", "10m")
    release = threading.Event()
    running: list[int] = []
    finished: list[int] = []

    @app.step
    async def item(n: int) -> int:
        running.append(n)
        await asyncio.to_thread(release.wait, 120)  # it ends when the test says (bounded, should the test fail)
        finished.append(n)
        return n

    @app.workflow(name="t.graceful", executor=Executor.parallel(max_async_concurrent=4))
    def graceful(wf: Workflow):
        return wf.map(item, list(range(8)), concurrency=2)

    worker = start_worker()
    run = graceful.submit()
    wait_until(lambda: len(running) == 2, message="two items running")
    run.cancel()
    # The items end only once the worker has told the run to stop: were the map to start another
    # item in the slots they free, it would be after the cancel.
    wait_until(lambda: _told_to_stop(worker, run.id), message="the worker to tell the run to stop")
    release.set()
    with pytest.raises(RunFailed, match="canceled"):
        run.wait(timeout=60)
    assert run.status() is RunStatus.CANCELED
    assert sorted(finished) == [0, 1] and sorted(running) == [0, 1]  # no item started after the cancel
    steps = _steps_by_key(app, run.id)
    assert [steps[f"item[{i}]"].status for i in range(3)] == [StepStatus.COMPLETED] * 2 + [StepStatus.PENDING]
    assert steps["item[1]"].output == 1  # kept as a checkpoint


def _told_to_stop(worker, run_id: str) -> bool:
    """Whether `worker` has asked its attempt of `run_id` to stop (it read the cancel from the store)."""
    attempts = list(worker._dispatcher._busy.values())
    return any(attempt.run.id == run_id and attempt.stop_reason is not None for attempt in attempts)


def test_a_workflow_that_times_out_stops_its_steps(app, start_worker):
    finished: list[int] = []

    @app.step
    async def slow(n: int) -> int:
        await asyncio.sleep(30)
        finished.append(n)
        return n

    @app.workflow(name="t.slow", timeout="300ms", executor=Executor.parallel(max_async_concurrent=2))
    def too_slow(wf: Workflow):
        return wf.map(slow, [1, 2])

    start_worker()
    run = too_slow.submit()
    with pytest.raises(RunFailed, match="Timeout"):
        run.wait(timeout=30)
    assert finished == []
    assert all(step.status is not StepStatus.COMPLETED for step in app.store.run_steps(run.id))


def test_over_limit_requests_and_claim_timeouts_fail_the_step_clearly(app, start_worker, monkeypatch):
    app.set_pool_limit("tiny", 1)
    app.set_pool_limit("paused", 0)

    @app.step(pool="tiny", pool_slots=3)
    def greedy() -> int:
        return 1

    @app.step(pool="paused")
    def patient() -> int:
        return 1

    @app.workflow(name="t.greedy")
    def asks_too_much(wf: Workflow):
        return wf.step(greedy)

    @app.workflow(name="t.patient")
    def waits_too_long(wf: Workflow):
        return wf.step(patient)

    monkeypatch.setenv("TIDEGATE_CLAIM_TIMEOUT", "300ms")
    start_worker()
    with pytest.raises(
        RunFailed, match=r"step greedy failed: PoolRequestTooLarge: .*3 slots of pool 'tiny'.*limit is 1"
    ):
        asks_too_much.submit().wait(timeout=30)
    with pytest.raises(RunFailed, match=r"step patient failed: PoolClaimTimeout: .*pool 'paused' \(0/0 claimed\)"):
        waits_too_long.submit().wait(timeout=30)


def test_a_retried_map_item_takes_a_window_slot_again(app, start_worker):
    tries: dict[int, int] = {}
    active: list[int] = []
    peak: list[int] = []

    @app.step(max_attempts=2, retry_backoff="10ms")
    async def wobbly(n: int) -> int:
        tries[n] = tries.get(n, 0) + 1
        active.append(n)
        peak.append(len(active))
        await asyncio.sleep(0.05)
        active.remove(n)
        if tries[n] == 1 and n % 2 == 0:
            raise ConnectionError(f"item {n} flaked")
        return n

    @app.workflow(name="t.wobbly", executor=Executor.parallel(max_async_concurrent=10))
    def wobbly_map(wf: Workflow):
        return wf.map(wobbly, list(range(6)), concurrency=2)

    start_worker()
    run = wobbly_map.submit()
    assert run.wait(timeout=30) == list(range(6))
    assert tries == {0: 2, 1: 1, 2: 2, 3: 1, 4: 2, 5: 1}
    assert max(peak) == 2  # a retry re-claims its window slot: never a third item in flight
    window_claims = [
        e for e in app.store.run_events(run.id) if e.type == "StepSlotClaimed" and e.step_key == "wobbly[0]"
    ]
    assert len(window_claims) == 1  # the retry's window slot (the first came from next_map_item)


def test_every_step_waiting_for_a_pool_is_visible_and_none_starves(app, start_worker):
    """Steps of one run queue for a pool behind one waiter, yet each is seen waiting (pending),
    and a step granted on its first try runs at once instead of queueing behind the waiter."""
    app.set_pool_limit("narrow", 2)
    gate = ThreadGate()
    running: list[int] = []

    @app.step(pool="narrow")
    async def narrow(n: int) -> int:
        running.append(n)
        assert await gate.wait_async(60)
        await asyncio.sleep(0.01)
        return n

    @app.workflow(name="t.narrow", executor=Executor.parallel(max_async_concurrent=30))
    def many(wf: Workflow):
        return wf.step(collect, [wf.step(narrow, n) for n in range(20)])

    @app.step
    def collect(values: list[int]) -> list[int]:
        return values

    start_worker()
    run = many.submit()

    def pool_status():
        return next((pool for pool in app.store.pools() if pool.name == "narrow"), None)

    wait_until(
        lambda: (status := pool_status()) is not None and status.pending == 18 and len(running) == 2,
        message="2 steps running and 18 pending",
    )
    assert pool_status().claimed == 2
    waiting = [step for step in app.store.run_steps(run.id) if step.waiting_for]
    assert len(waiting) == 18 and all(step.waiting_for == {"pool:narrow": 1} for step in waiting)
    gate.set()
    assert run.wait(timeout=60) == list(range(20))
    kinds = [e.type for e in app.store.run_events(run.id)]
    assert kinds.count("StepSlotWaiting") == 18 and kinds.count("StepSlotClaimed") >= 20
    assert pool_status().claimed == 0 and pool_status().pending == 0
