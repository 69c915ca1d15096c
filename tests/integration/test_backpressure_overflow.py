"""Overflow signal: runs the policy would admit wait while every worker is full -> tell the autoscaler.

`app.on_overflow(callback)` is called with the backlog and a `CapacityOverflow`
event is written, at most once per `TIDEGATE_OVERFLOW_INTERVAL` (here 1s or 5s,
while the worker polls every 0.1s, so an unthrottled signal would fire ~10
times a second). Runs held back only by a queue or tag limit are not
overflow: another worker could not run them either. A failing callback is
logged and dispatch goes on.
"""

from __future__ import annotations

import itertools
import json
import logging
import threading
from contextlib import ExitStack

import pytest

from tests.apps.backpressure import running_workers
from tidegate import App, Concurrency, Rate, RunQueueConfig, RunStatus, TagConcurrencyLimit
from tidegate.engine.operators.limits import set_limit

from .conftest import execute_sql, wait_until

QUEUE = "ovf"
INTERVAL = 1.0


@pytest.fixture(autouse=True)
def _overflow_interval(monkeypatch):
    monkeypatch.setenv("TIDEGATE_OVERFLOW_INTERVAL", "1s")  # read when the worker is built


def _overflow_events(database_url):
    rows = execute_sql(
        database_url, "SELECT at, metadata FROM tidegate_events WHERE type = 'CapacityOverflow' ORDER BY id"
    )
    return [(at, json.loads(meta) if isinstance(meta, str) else meta) for at, meta in rows]


def _seconds(value) -> float:
    return value.timestamp() if hasattr(value, "timestamp") else float(value)


def test_overflow_fires_while_saturated_at_most_once_per_interval(app, start_worker, database_url, clock, monkeypatch):
    """A long interval on a clock the test moves, while the worker polls ten times a second."""
    interval = 5.0  # well within the lease (30 s): the worker and its runs stay alive across the advance
    monkeypatch.setenv("TIDEGATE_OVERFLOW_INTERVAL", f"{interval:g}s")
    gate = threading.Event()
    calls: list[int] = []

    @app.task(name="ovf.held", queue=QUEUE)
    def held(n: int) -> int:
        gate.wait(60)
        return n

    app.on_overflow(calls.append)
    worker = start_worker(app, max_workers=2, queues=[QUEUE], poll_interval="0.1s")
    handles = held.submit_many([{"n": n} for n in range(6)])
    wait_until(lambda: worker.in_flight == 2, 30, message="the worker to be full")
    wait_until(lambda: calls, 30, message="the overflow signal")
    # within the interval the turn is taken: nobody raises it again (a probe asks like a worker would)
    assert app.store.check_overflow("probe", [QUEUE], interval) is None
    clock.advance(interval)
    wait_until(lambda: len(calls) >= 2, 30, message="the signal of the next interval")
    assert app.store.check_overflow("probe", [QUEUE], interval) is None
    assert calls == [4, 4]  # 6 submitted, 2 running; once per interval
    gate.set()
    assert [handle.wait(timeout=30) for handle in handles] == list(range(6))

    events = _overflow_events(database_url)
    assert len(events) == len(calls), "one CapacityOverflow event per callback round"
    assert all(meta["backlog"] >= 1 and meta["workers"] == 1 and meta["queues"] == [QUEUE] for _, meta in events)
    times = [_seconds(at) for at, _ in events]
    assert all(later - earlier >= interval - 1e-6 for earlier, later in itertools.pairwise(times)), times
    assert not worker.join(0)


def test_a_worker_that_raised_the_signal_does_not_ask_again_within_the_interval(app, start_worker, monkeypatch):
    """Once this worker raised it, the store's turn is held for the interval: every check made
    before then would find it held, so the worker (full, polled ten times a second) makes none."""
    interval = 5.0  # on the test clock, which this test does not move
    monkeypatch.setenv("TIDEGATE_OVERFLOW_INTERVAL", f"{interval:g}s")
    gate = threading.Event()
    asked: list[str] = []
    real = app.store.check_overflow

    def counted(worker_id, queues, every):
        asked.append(worker_id)
        return real(worker_id, queues, every)

    monkeypatch.setattr(app.store, "check_overflow", counted)

    @app.task(name="ovf.quiet", queue=QUEUE)
    def held(n: int) -> int:
        gate.wait(60)
        return n

    raised: list[tuple[int, int]] = []  # (backlog, checks made until then)
    app.on_overflow(lambda backlog: raised.append((backlog, len(asked))))
    start_worker(app, max_workers=2, queues=[QUEUE], poll_interval="0.1s")
    handles = held.submit_many([{"n": n} for n in range(4)])
    wait_until(lambda: raised, 30, message="the overflow signal")
    threading.Event().wait(1.0)  # ten polls of a full worker
    [(backlog, checks)] = raised
    assert backlog == 2 and len(asked) == checks, asked  # none since it raised the signal
    gate.set()
    assert [handle.wait(timeout=30) for handle in handles] == list(range(4))


def test_a_failing_callback_is_logged_and_does_not_break_dispatch(app, start_worker, caplog):
    gate = threading.Event()
    survivors: list[int] = []

    @app.task(name="ovf.held2", queue=QUEUE)
    def held(n: int) -> int:
        gate.wait(60)
        return n

    @app.on_overflow
    def broken(backlog: int) -> None:
        raise RuntimeError("autoscaler unreachable")

    app.on_overflow(survivors.append)
    caplog.set_level(logging.ERROR, logger="tidegate.worker")
    worker = start_worker(app, max_workers=1, queues=[QUEUE], poll_interval="0.1s")
    handles = held.submit_many([{"n": n} for n in range(3)])
    wait_until(lambda: survivors, 30, message="the overflow signal")
    assert survivors[0] == 2
    assert "on_overflow callback failed" in caplog.text and "autoscaler unreachable" in caplog.text
    gate.set()
    assert [handle.wait(timeout=30) for handle in handles] == [0, 1, 2]
    assert not worker.join(0)
    # and it keeps serving
    assert held.submit(n=7).wait(timeout=30) == 7


@pytest.mark.parametrize("limit", ["queue", "tag"])
def test_no_overflow_while_runs_wait_only_on_a_limit(database_url, clock, limit):
    """The worker is full with the one run the limit allows; the rest wait on the limit, not on a worker.

    Raising the limit (live) then makes them eligible: now the signal must fire.
    """
    run_queue = None
    if limit == "tag":
        run_queue = RunQueueConfig(tag_concurrency_limits=[TagConcurrencyLimit("res", 1, value="x")])
    gate = threading.Event()
    calls: list[int] = []
    with App(database_url, run_queue=run_queue, clock=clock) as app, ExitStack() as stack:
        if limit == "queue":
            app.queue("lim", concurrency=Concurrency(global_limit=1))

        @app.task(name="ovf.limited", queue="lim", tags={"res": "x"})
        def limited(n: int) -> int:
            gate.wait(60)
            return n

        app.on_overflow(calls.append)
        [worker] = stack.enter_context(
            running_workers(app, {"max_workers": 1, "queues": ["lim"], "poll_interval": "0.1s"})
        )
        handles = limited.submit_many([{"n": n} for n in range(4)])
        wait_until(lambda: worker.in_flight == 1, 30, message="the one allowed run to start")
        wait_until(
            lambda: all(r.block_reason for r in app.store.list_queued("lim")),
            30,
            message="the others to be recorded as blocked by the limit",
        )
        # Past the overflow interval no earlier signal holds the turn: only a want of eligible runs
        # can refuse it now (a signal the worker raised meanwhile would show in calls and events).
        clock.advance(INTERVAL)
        assert app.store.check_overflow("probe", ["lim"], INTERVAL) is None
        assert calls == [], "overflow raised for runs that only a limit holds back"
        assert _overflow_events(database_url) == []

        set_limit(app.store, "queue:lim" if limit == "queue" else "tag:res=x", 10)
        wait_until(lambda: calls, 30, message="the overflow signal once the limit no longer holds the runs")
        assert calls[0] == 3
        gate.set()
        for handle in handles:
            handle.wait(timeout=30)
        assert app.store.status_counts()[RunStatus.COMPLETED] == 4


def test_no_overflow_while_runs_wait_only_on_a_rate(database_url, clock):
    """The worker is full with the one run the rate allowed this hour; the other three wait for the
    rate's next start, which no other worker could give them: no signal (they were counted as
    waiting for a worker while the check ignored the stored rate states)."""
    gate = threading.Event()
    calls: list[int] = []
    with App(database_url, clock=clock) as app, ExitStack() as stack:
        app.queue("lim", rate=Rate(limit=1, per="1h", burst=1))

        @app.task(name="ovf.rated", queue="lim")
        def rated(n: int) -> int:
            gate.wait(60)
            return n

        app.on_overflow(calls.append)
        [worker] = stack.enter_context(
            running_workers(app, {"max_workers": 1, "queues": ["lim"], "poll_interval": "0.1s"})
        )
        handles = rated.submit_many([{"n": n} for n in range(4)])
        wait_until(lambda: worker.in_flight == 1, 30, message="the one run the rate allows to start")
        clock.advance(INTERVAL)
        assert app.store.check_overflow("probe", ["lim"], INTERVAL) is None
        assert calls == [], "overflow raised for runs that only a rate holds back"
        assert _overflow_events(database_url) == []
        gate.set()
        handles[0].wait(timeout=30)
