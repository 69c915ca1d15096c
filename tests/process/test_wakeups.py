"""Wake-ups cross processes: a new run reaches an idle worker without waiting for its poll.

The worker process polls only every 30 s, so a run that completes within 10 s
can only have been picked up through the wake-up mechanism (LISTEN/NOTIFY on
PostgreSQL, datagrams / data_version on SQLite). No latency is asserted.
"""

import time

import pytest

from tests.apps.counted import make_app

pytestmark = pytest.mark.slow


def test_an_idle_worker_in_another_process_is_woken_by_a_submit(database_url, worker_processes, tmp_path):
    env = {"TIDEGATE_POLL_INTERVAL": "1h", "TIDEGATE_TEST_LOG": str(tmp_path / "executions.log")}
    with make_app(database_url) as app:
        ping = app.tasks["counted.ping"]
        probe = ping.submit()  # claimed by the worker's first turn, whatever its poll
        process = worker_processes.spawn("tests.apps.counted:app", database_url, max_workers=2, env=env)
        try:
            assert probe.wait(timeout=60) == "pong"
        except Exception:
            pytest.fail("the worker process did not start:\n" + worker_processes.output(process))
        # now the worker is idle, sleeping an hour unless woken: a wait of a minute ends only by a wake-up
        for _ in range(3):
            time.sleep(0.5)
            handle = ping.submit()
            assert handle.wait(timeout=60) == "pong", worker_processes.output(process)
            assert process.poll() is None


def test_postgres_wake_ups_stay_within_their_schema(postgres_url):
    """Two tidegate databases in one PostgreSQL database (two schemas) must not wake each other's workers."""
    import threading
    import uuid

    import psycopg

    from tests.conftest import POSTGRES_ADMIN_URL, raw_store
    from tidegate import App

    other_schema = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True) as admin:
        admin.execute(f'CREATE SCHEMA "{other_schema}"')
    other_url = f"{POSTGRES_ADMIN_URL}?options=-csearch_path%3D{other_schema}"
    app = App(postgres_url)

    @app.task(name="noop")
    def noop() -> None: ...

    _ = app.store  # opening the store migrates it
    other = raw_store(other_url)
    other.migrate()
    woken = {"mine": threading.Event(), "other": threading.Event()}
    listeners = [app.store.listen(woken["mine"].set), other.listen(woken["other"].set)]
    try:
        for name, event in woken.items():  # each listener wakes once when its LISTEN starts: let that pass
            assert event.wait(10), f"the {name} listener did not start"
            event.clear()
        noop.submit()
        assert woken["mine"].wait(30), "a submit did not wake a listener on its own schema"
        time.sleep(0.5)
        assert not woken["other"].is_set(), "a submit in one schema woke a listener on another"
    finally:
        for listener in listeners:
            listener.close()
        other.close()
        app.close()
        with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True) as admin:
            admin.execute(f'DROP SCHEMA IF EXISTS "{other_schema}" CASCADE')
