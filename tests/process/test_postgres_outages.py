"""A worker that lives through a PostgreSQL outage, or a frozen wake-up connection, resumes at once.

The shared server must not be stopped, so the worker reaches it through a
TCP proxy the test breaks (`tests/tcp_proxy.py`); runs are submitted straight
to the server, so only the worker's recovery is measured. Each run records
when it started (in this process: the worker runs in a thread).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import psycopg
import pytest

from tests.tcp_proxy import TcpProxy
from tidegate import App, ConfigurationError, ServerUnreachable, Worker
from tidegate.app import settings
from tidegate.storage.postgres import connections

from .conftest import POSTGRES_ADMIN_URL, wait_until

pytestmark = pytest.mark.slow

OUTAGE = 4.0  # long enough for psycopg_pool's backoff (1, 2, 4 s...) to skip past the server's return
# The issue asks for 1 s; the pool's backoff it fixed resumed 2.6-3.1 s late. A latency is the
# behaviour here, so a bound stays: below the bug's, with what slack that leaves a loaded machine.
RESUMED_WITHIN = 2.0
CHECK_INTERVAL = 1.0
WOKEN_WITHIN = 30.0  # seconds: generous for a stalled machine, and far below the hour's poll


@dataclass
class Rig:
    proxy: TcpProxy
    direct: App  # submits, straight to the server
    behind: App  # the worker's app, through the proxy
    started: dict[str, float] = field(default_factory=dict)
    seen: threading.Condition = field(default_factory=threading.Condition)

    def submit(self, key: str) -> None:
        self.direct.tasks["outage.mark"].submit(key=key)

    def started_within(self, key: str, timeout: float) -> float | None:
        """When run `key` started (monotonic), or None if it did not within `timeout`."""
        with self.seen:
            self.seen.wait_for(lambda: key in self.started, timeout)
            return self.started.get(key)


def _app(url: str, rig_started: dict[str, float], seen: threading.Condition) -> App:
    app = App(url)

    @app.task(name="outage.mark")
    def mark(key: str) -> str:
        with seen:
            rig_started[key] = time.monotonic()
            seen.notify_all()
        return key

    return app


@pytest.fixture
def rig(postgres_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Rig]:
    monkeypatch.setenv("TIDEGATE_LISTEN_CHECK_INTERVAL", f"{CHECK_INTERVAL:g}s")
    proxy = TcpProxy.in_front_of(postgres_url)
    started: dict[str, float] = {}
    seen = threading.Condition()
    direct = _app(postgres_url, started, seen)
    behind = _app(proxy.url(postgres_url), started, seen)
    rig = Rig(proxy, direct, behind, started, seen)
    try:
        yield rig
    finally:
        proxy.thaw()
        proxy.up()
        behind.close()
        direct.close()
        proxy.close()


@contextmanager
def running_worker(rig: Rig, poll_interval: str) -> Iterator[None]:
    worker = rig.behind.worker(max_workers=2, poll_interval=poll_interval).start()
    try:
        rig.submit("probe")
        assert rig.started_within("probe", 30) is not None, "the worker did not start"
        yield
    finally:
        worker.stop(timeout=30, grace=0)
        assert worker.join(30), "the worker did not stop"


def test_work_resumes_within_a_second_of_the_database_coming_back(rig: Rig) -> None:
    """psycopg_pool retried after 1, 2, 4 s...: after a 4 s outage work resumed 2.6-3.1 s late."""
    with running_worker(rig, poll_interval="1s"):
        rig.proxy.down()
        time.sleep(OUTAGE)  # the worker's turns fail meanwhile (poll 1 s), so its pool backs off
        rig.proxy.up()
        back = time.monotonic()
        rig.submit("after")
        started = rig.started_within("after", 20)
        assert started is not None, "no run started within 20 s of the database coming back"
        print(f"resumed {started - back:.2f}s after the database came back")
        assert started - back < RESUMED_WITHIN


def _listener_ports(proxy: TcpProxy) -> set[int]:
    """The proxied connections that serve wake-ups (named by their application, or by their LISTEN)."""
    with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True) as connection:
        rows = connection.execute(
            "SELECT client_port FROM pg_stat_activity"
            " WHERE application_name = 'tidegate-listener' OR query LIKE 'LISTEN %'"
        ).fetchall()
    return {port for (port,) in rows} & proxy.upstream_ports()


def test_a_frozen_wake_up_connection_is_replaced_within_its_check(rig: Rig) -> None:
    """A frozen LISTEN backend (its TCP connection open) left every submit waiting for the backstop poll.

    The poll is an hour away: a start within WOKEN_WITHIN is a wake-up (a stall only delays it)."""
    with running_worker(rig, poll_interval="1h"):
        frozen = wait_until(lambda: _listener_ports(rig.proxy), 10, message="the worker's wake-up connections")
        rig.proxy.freeze(frozen)
        time.sleep(0.2)  # the freeze is in place (a pump may be mid-chunk) before the submit
        submitted = time.monotonic()
        rig.submit("frozen")
        started = rig.started_within("frozen", WOKEN_WITHIN)
        assert started is not None, "a submit waited for the backstop poll: the frozen connection went unnoticed"
        print(f"started {started - submitted:.2f}s after the submit (check interval {CHECK_INTERVAL:g}s)")
        # the new connection delivers wake-ups: a run starts long before the poll
        fresh = wait_until(lambda: _listener_ports(rig.proxy) - frozen, 10, message="a new wake-up connection")
        assert fresh
        time.sleep(0.3)
        rig.submit("after")
        assert rig.started_within("after", WOKEN_WITHIN) is not None, "the new wake-up connection delivers nothing"


def test_a_worker_started_while_the_server_is_down_waits_for_it(rig: Rig) -> None:
    """Workers started just before a server crash exited at once, and no run was claimed again."""
    rig.proxy.down()
    built: list[Worker] = []
    starting = threading.Thread(target=lambda: built.append(rig.behind.worker(max_workers=2, startup_wait="60s")))
    starting.start()
    time.sleep(1.0)  # the outage: the worker's first tries are refused
    assert starting.is_alive(), "the worker did not wait for the server"
    rig.proxy.up()
    starting.join(60)
    assert built, "the worker was not built once the server answered"
    worker = built[0].start()
    try:
        rig.submit("late")
        assert rig.started_within("late", 30) is not None, "the worker that waited does not work"
    finally:
        worker.stop(timeout=30, grace=0)


def test_a_worker_whose_server_went_down_before_it_registered_waits_for_it(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The pool's own wait for a connection would outlast a shorter outage, and hide a missing retry.
    monkeypatch.setattr(connections, "CONNECT_TIMEOUT", 1.0)
    worker = rig.behind.worker(max_workers=2, startup_wait="60s")
    rig.proxy.down()
    starting = threading.Thread(target=worker.start)
    starting.start()
    time.sleep(2.5)  # registering is refused meanwhile, for longer than the pool waits for a connection
    assert starting.is_alive() and not worker.join(0), "the worker did not wait to register"
    rig.proxy.up()
    starting.join(60)
    try:
        rig.submit("registered-late")
        assert rig.started_within("registered-late", 30) is not None, "the worker that waited does not work"
    finally:
        worker.stop(timeout=30, grace=0)


def test_with_no_startup_wait_a_worker_fails_at_once(rig: Rig) -> None:
    rig.proxy.down()
    with pytest.raises(ServerUnreachable, match="cannot connect to PostgreSQL"):
        rig.behind.worker(startup_wait=0)


def test_the_listen_check_interval_must_be_positive(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIDEGATE_LISTEN_CHECK_INTERVAL", "0")
    with pytest.raises(ConfigurationError, match="TIDEGATE_LISTEN_CHECK_INTERVAL"):
        settings.listen_check_interval()
    monkeypatch.setenv("TIDEGATE_LISTEN_CHECK_INTERVAL", "250ms")
    assert settings.listen_check_interval() == 0.25
