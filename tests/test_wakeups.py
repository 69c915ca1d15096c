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
    env = {"TIDEGATE_POLL_INTERVAL": "30s", "TIDEGATE_TEST_LOG": str(tmp_path / "executions.log")}
    with make_app(database_url) as app:
        ping = app.tasks["counted.ping"]
        probe = ping.submit()  # claimed by the worker's first turn, whatever its poll
        process = worker_processes.spawn("tests.apps.counted:app", database_url, max_workers=2, env=env)
        try:
            assert probe.wait(timeout=60) == "pong"
        except Exception:
            pytest.fail("the worker process did not start:\n" + worker_processes.output(process))
        # now the worker is idle, sleeping up to 30 s unless woken
        for _ in range(3):
            time.sleep(0.5)
            handle = ping.submit()
            assert handle.wait(timeout=10) == "pong", worker_processes.output(process)
            assert process.poll() is None
