"""A worker is not woken by its own cycles, and is still woken by every other commit (issue 16).

A cycle that reports outcomes notifies (freed slots, finished runs). Its own worker used to take
that wake-up as news from outside: the next turn read the store again (a claim, or a full
worker's read for cancels) for what the cycle's own claim and cancel read had already seen. The
cycle's wake-up now names its worker and that worker's listener passes it over, by exact payload.

Every worker here polls once an hour: only a wake-up can make it act.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from tests.conftest import wait_until
from tests.races import TIMEOUT
from tidegate import App, RunQueueConfig, RunStatus
from tidegate.domain.model import CycleRequest

HOUR = 3600


class NotifyTaps:
    """Every notification a listener connection takes, and when the taking moved on past them.

    psycopg's `Connection.notifies` is wrapped (the PostgreSQL listener takes its notifications
    through it, with the old code and the new), so the test knows when a listener has handled a
    notification, whether or not it called back for it."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.watching = threading.Event()  # set: notifications taken from now on are counted
        self.taken = threading.Event()  # a counted notification was taken, to the end of its burst
        self.moved_on = threading.Event()  # and the listener came back for more: its callback is done
        self.payloads: list[str] = []  # of the counted notifications, in the order taken
        real = psycopg.Connection.notifies
        taps = self

        def notifies(connection: psycopg.Connection, **options: Any) -> Iterator[psycopg.Notify]:
            if taps.taken.is_set():
                taps.moved_on.set()
            seen = False
            for notify in real(connection, **options):
                if taps.watching.is_set():
                    seen = True
                    taps.payloads.append(notify.payload)
                yield notify
            if seen:
                taps.taken.set()

        monkeypatch.setattr(psycopg.Connection, "notifies", notifies)


def test_a_workers_own_cycle_does_not_wake_it(app: App, backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The run's outcome goes out in a cycle that notifies. Once the worker's listener has taken
    that notification and moved on, the worker is stopped: on the old code the listener had called
    back, and the wake-up became one more store cycle (a claim for nothing, or at the stop, a read
    for cancels). Now the listener passes it over, and the stop sends nothing to the store."""
    if backend == "sqlite":
        pytest.skip("SQLite's backstop (data_version) sees every commit, and cannot tell whose it was")
    monkeypatch.setenv("TIDEGATE_LISTEN_CHECK_INTERVAL", str(HOUR))  # no round trip takes a notification
    taps = NotifyTaps(monkeypatch)

    @app.task(name="own.noop", queue="own")
    def noop() -> None:
        return None

    store = app.store
    real_cycle = store.cycle
    turns: list[tuple[int, int, int]] = []  # (starts, outcomes, claim limit) of each store cycle
    after_outcome: list[tuple[int, int, int]] = []  # the cycles from the one reporting the outcome on

    def cycle(request: CycleRequest) -> Any:
        turn = (len(request.starts), len(request.outcomes), request.claim_limit)
        if request.outcomes or after_outcome:
            after_outcome.append(turn)
            taps.watching.set()  # before the commit: its notification comes after this
        turns.append(turn)
        return real_cycle(request)

    store.cycle = cycle  # type: ignore[method-assign]
    callbacks: list[bool] = []  # each listener callback: whether it came after the outcome's cycle began
    idle = threading.Event()  # a read that began after the first callback returned: the worker sleeps
    real_peek = store.peek_cycle

    def peek_cycle(*arguments: Any) -> Any:
        began_after_a_callback = bool(callbacks)
        result = real_peek(*arguments)
        if began_after_a_callback:
            idle.set()
        return result

    store.peek_cycle = peek_cycle  # type: ignore[method-assign]
    worker = app.worker(queues=["own"], max_workers=2, poll_interval=HOUR)
    real_on_notification = worker._on_notification

    def on_notification() -> None:
        callbacks.append(taps.watching.is_set())
        real_on_notification()

    worker._on_notification = on_notification  # type: ignore[method-assign]
    worker.start()
    try:
        wait_until(lambda: callbacks, TIMEOUT, message="the listener's first wake-up (LISTEN began)")
        # The turn that wake-up began must be over before the submit: a turn reading the store after
        # the submit's commit finds the run without its wake-up, which a slow listener then takes
        # during the outcome's cycle and calls back for (not the worker's own).
        assert idle.wait(TIMEOUT), "the worker's turn after LISTEN began never looked at the store"
        run = noop.submit()  # its wake-up is the only way the worker finds it
        run.wait(TIMEOUT)
        assert run.status() is RunStatus.COMPLETED
        assert taps.moved_on.wait(TIMEOUT), "the worker's listener never took the outcome's notification"
    finally:
        worker.stop(timeout=30, grace=0)
    assert [turn for turn in after_outcome if turn[1]] == after_outcome[:1], after_outcome  # one outcome turn
    assert True not in callbacks, (callbacks, taps.payloads, worker.id)  # its own notification called nothing back
    assert after_outcome[1:] == [], turns  # and no store cycle followed


def test_other_commits_still_wake_an_idle_worker(database_url: str, clock: Any, backend: str) -> None:
    """A sibling worker's cycle (same process, same store: its wake-up names the sibling), then a
    submit from this same process, must each wake a worker that polls once an hour.

    With the global cap of 1 held by the sibling's run, the idle worker's run waits; the sibling's
    outcome frees the cap in a cycle whose wake-up is the only one the idle worker gets. (On
    SQLite a lost wake-up would be made good by the listener's `data_version` backstop.)"""
    app = App(database_url, clock=clock, run_queue=RunQueueConfig(max_concurrent_runs=1))
    holding, release = threading.Event(), threading.Event()

    @app.task(name="wake.hold", queue="a")
    def hold() -> None:
        holding.set()
        assert release.wait(TIMEOUT)

    @app.task(name="wake.noop", queue="b")
    def noop() -> None:
        return None

    sibling = app.worker(queues=["a"], max_workers=1, poll_interval=HOUR)
    idle = app.worker(queues=["b"], max_workers=2, poll_interval=HOUR)
    wakes: list[bool] = []  # the idle worker's callbacks: whether the sibling's run was released
    real_on_notification = idle._on_notification

    def on_notification() -> None:
        wakes.append(release.is_set())
        real_on_notification()

    idle._on_notification = on_notification  # type: ignore[method-assign]
    try:
        held = hold.submit()
        sibling.start()
        assert holding.wait(TIMEOUT)
        waiting = noop.submit()  # behind the cap
        idle.start()
        if backend == "postgres":  # the wake-up the listener gives when LISTEN starts has come and gone
            wait_until(lambda: wakes, TIMEOUT, message="the listener's first wake-up")
        wait_until(lambda: waiting.status() is RunStatus.QUEUED, TIMEOUT, message="the run waiting")
        release.set()
        held.wait(TIMEOUT)
        waiting.wait(TIMEOUT)
        assert waiting.status() is RunStatus.COMPLETED
        later = noop.submit()  # from this process's own store
        later.wait(TIMEOUT)
        assert later.status() is RunStatus.COMPLETED
    finally:
        release.set()
        idle.stop(timeout=30, grace=0)
        sibling.stop(timeout=30, grace=0)
        app.close()
