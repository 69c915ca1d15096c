"""A worker starting while its server does not answer waits for it (`worker.startup.reach`), on an
injected clock whose sleeps only advance it; and a store that is not a server is not waited for."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import pytest

from tidegate import App, ServerUnreachable, StoreUnavailable
from tidegate.testing import ControlledClock
from tidegate.worker.startup import FIRST_RETRY, MAX_RETRY, reach


def failing(times: int, error: Exception, calls: list[float], clock: ControlledClock) -> Callable[[], str]:
    def attempt() -> str:
        calls.append(clock.monotonic())
        if len(calls) <= times:
            raise error
        return "reached"

    return attempt


def test_a_server_that_comes_back_is_reached_with_doubling_waits() -> None:
    clock, calls, slept = ControlledClock(), [], []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        clock.advance(seconds)

    attempt = failing(7, ServerUnreachable("down"), calls, clock)
    assert reach(attempt, 60, clock=clock, sleep=sleep) == "reached"
    assert len(calls) == 8
    assert slept == [FIRST_RETRY * 2**n for n in range(5)] + [MAX_RETRY, MAX_RETRY]


def test_past_the_wait_the_servers_own_error_is_raised() -> None:
    clock, calls = ControlledClock(), []
    error = ServerUnreachable("cannot connect to PostgreSQL at h:1/x: refused")
    with pytest.raises(ServerUnreachable) as raised:
        reach(failing(10**6, error, calls, clock), 5, clock=clock, sleep=clock.advance)
    assert raised.value is error
    assert 4.99 <= calls[-1] - calls[0] < 5 + MAX_RETRY  # tried to the end of the wait, not beyond it


def test_no_wait_means_one_try() -> None:
    clock, calls = ControlledClock(), []
    with pytest.raises(ServerUnreachable):
        reach(failing(1, ServerUnreachable("down"), calls, clock), 0, clock=clock, sleep=clock.advance)
    assert len(calls) == 1


def test_a_store_that_is_no_server_is_not_waited_for() -> None:
    clock, calls = ControlledClock(), []
    with pytest.raises(StoreUnavailable):
        reach(failing(1, StoreUnavailable("cannot create /x/t.db"), calls, clock), 60, clock=clock, sleep=clock.advance)
    assert len(calls) == 1


def test_a_worker_asked_to_stop_waits_no_more() -> None:
    clock, calls = ControlledClock(), []
    stop_after = 3
    with pytest.raises(ServerUnreachable):
        reach(
            failing(10**6, ServerUnreachable("down"), calls, clock),
            60,
            clock=clock,
            sleep=clock.advance,
            given_up=lambda: len(calls) >= stop_after,
        )
    assert len(calls) == stop_after


def test_the_wait_is_said_once(caplog: pytest.LogCaptureFixture) -> None:
    clock, calls = ControlledClock(), []
    with caplog.at_level(logging.WARNING, logger="tidegate.worker"):
        reach(failing(4, ServerUnreachable("server down"), calls, clock), 60, clock=clock, sleep=clock.advance)
    said = [record.getMessage() for record in caplog.records]
    assert len(said) == 1
    assert said[0].startswith("server down; trying again for up to 60s")


def test_an_sqlite_file_that_cannot_be_created_fails_the_worker_at_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "a-file").touch()
    app = App(f"sqlite:///{tmp_path}/a-file/t.db")
    with caplog.at_level(logging.WARNING, logger="tidegate.worker"), pytest.raises(StoreUnavailable) as raised:
        app.worker(queues=["default"], startup_wait="1h")
    assert not isinstance(raised.value, ServerUnreachable)
    assert "trying again" not in caplog.text  # no wait was begun, let alone the hour
