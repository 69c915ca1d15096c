"""`tidegate worker --metrics-port N`: a worker process serves its own Prometheus metrics.

After it has run some runs, a scrape of its port shows, per task and outcome
status, a histogram of run durations and of queue waits with one
observation per attempt, and its claims per queue: a Prometheus parser
reads them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import REPO_ROOT, wait_until
from tidegate import App, RunStatus

from .test_api_serve import _environment, _free_port

APP = "tests.apps.http_tasks:app"
RUNS = 3


def _sync_customer(customer_id: int) -> dict[str, int]:
    return {"synced": customer_id}


def _scrape(port: int) -> dict[tuple[str, frozenset[tuple[str, str]]], float] | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            text = response.read().decode()
    except OSError:
        return None
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


@pytest.mark.slow
def test_a_worker_serves_run_duration_and_queue_wait_histograms_after_runs(app: App, database_url, tmp_path) -> None:
    port = _free_port()
    log = open(tmp_path / "worker.log", "wb")  # noqa: SIM115 - closed below
    process = subprocess.Popen(
        [sys.executable, "-m", "tidegate", "worker", APP, "--metrics-port", str(port), "--database", database_url],
        cwd=REPO_ROOT, env=_environment(database_url), stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        task = app.task(name="sync_customer")(_sync_customer)
        handles = [task.submit(customer_id=n) for n in range(RUNS)]
        for handle in handles:
            wait_until(lambda handle=handle: handle.info().status is RunStatus.COMPLETED, message="runs completed")
        completed = frozenset({("task", "sync_customer"), ("status", "completed")})

        def scraped_every_attempt():
            samples = _scrape(port)
            if samples is None or samples.get(("tidegate_run_duration_seconds_count", completed)) != RUNS:
                return None
            return samples

        samples = wait_until(scraped_every_attempt, message="the worker's metrics to show every attempt")
        assert samples[("tidegate_queue_wait_seconds_count", completed)] == RUNS
        assert samples[("tidegate_run_duration_seconds_bucket", completed | {("le", "+Inf")})] == RUNS
        assert samples[("tidegate_run_duration_seconds_sum", completed)] >= 0
        assert samples[("tidegate_claimed_runs_total", frozenset({("queue", "default")}))] == RUNS
        assert ("tidegate_capacity_overflow_total", frozenset()) in samples
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGTERM)
        process.wait(timeout=30)
        log.close()
    assert process.returncode == 0, (tmp_path / "worker.log").read_text()
