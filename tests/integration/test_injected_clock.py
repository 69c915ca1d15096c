"""The worker, its pool guard and run handles read time from the app's clock, not from `time`.

Each test sets a duration far longer than the test may take (an hour), then
moves the app's `ShiftedClock` (the shared `clock` fixture) past it: the code must notice at its next reading,
within a poll of real time. Code that read `time.monotonic()` directly would
wait the hour, and the bounded join or wait below would fail.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from tests.support.pool_guard import acquire_sync
from tidegate import PoolClaimTimeout, RunStatus, WaitTimeout
from tidegate.domain.model import CycleRequest
from tidegate.domain.pools import pool_needs
from tidegate.domain.steps import SlotRequest
from tidegate.engine.runtime.pools import ClaimPolicy, PoolGuard

HOUR = 3600.0
QUEUE = "clocked"


def raised_within(seconds: float, call: Callable[[], Any]) -> BaseException | None:
    """What `call` raised, run on a daemon thread; fails if it is still going after `seconds`
    (code reading real time would block for the hour, and the test must fail, not hang)."""
    raised: list[BaseException | None] = []

    def run() -> None:
        try:
            call()
        except BaseException as error:
            raised.append(error)
        else:
            raised.append(None)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert raised, f"still waiting after {seconds}s of real time: the clock's advance went unseen"
    return raised[0]


def test_an_idle_worker_exits_once_the_clock_passes_max_idle(app, clock, start_worker, caplog):
    @app.task(name="clock.noop", queue=QUEUE)
    def noop() -> None:
        return None

    worker = start_worker(app, max_idle="1h", poll_interval="20ms")
    assert not worker.join(0.5), "the worker exited long before its max_idle"
    clock.advance(HOUR)
    assert worker.join(10), "an hour passed on the worker's clock, but it did not exit for max_idle"
    assert "worker stopped on an error" not in caplog.text


def test_a_stopping_worker_hands_back_a_run_once_the_clock_passes_its_grace(app, clock, start_worker):
    started, release = threading.Event(), threading.Event()

    @app.task(name="clock.stubborn", queue=QUEUE)
    def stubborn() -> None:
        started.set()
        release.wait(60)  # ignores the stop request: only the grace ends it

    # A long lease keeps the lease watchdog asleep (it looks every tenth of the lease) while
    # the test runs: only the stop grace can end this worker.
    worker = start_worker(app, poll_interval="20ms", lease_duration="10m")
    handle = stubborn.submit()
    try:
        assert started.wait(30)
        worker.request_stop(grace=HOUR)
        assert not worker.join(0.5), "the worker stopped before its grace, with a run in flight"
        clock.advance(HOUR)
        assert worker.join(10), "the grace passed on the worker's clock, but it did not stop"
    finally:
        release.set()
    assert handle.status() is RunStatus.QUEUED  # handed back, to run again elsewhere


def test_a_run_handle_wait_times_out_once_the_clock_passes_its_timeout(app, clock):
    @app.task(name="clock.never_run", queue=QUEUE)
    def never_run() -> None:
        return None

    handle = never_run.submit()  # no worker: it stays queued
    threading.Timer(0.3, clock.advance, (HOUR,)).start()
    assert isinstance(raised_within(10, lambda: handle.wait(timeout="1h")), WaitTimeout)


def test_a_pool_claim_times_out_once_the_guard_clock_passes_the_claim_timeout(app, clock):
    @app.task(name="clock.holder", queue=QUEUE)
    def holder() -> None:
        return None

    store = app.store
    store.set_pool_limit("db", 1, 300)
    holder.submit()
    holder.submit()
    first, second = (run.fence for run in store.cycle(CycleRequest("w1", [QUEUE], [], [], 2, 60)).claimed)
    assert store.acquire_slots(first, "w1", SlotRequest("hog", pool_needs({"db": 1}), {})).granted
    guard = PoolGuard(store, ClaimPolicy(timeout=HOUR, poll_interval=0.05, poll_jitter=0), clock=clock)
    try:
        threading.Timer(0.3, clock.advance, (HOUR,)).start()
        waiting = raised_within(10, lambda: acquire_sync(guard, second, "w1", "waiting", pool_needs({"db": 1})))
        assert isinstance(waiting, PoolClaimTimeout)
    finally:
        guard.close()
