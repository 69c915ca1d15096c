"""The worker's log says what happened to every attempt (issue 15 item 5).

One INFO line per attempt outcome naming the run, the task and the attempt;
a failure's traceback only at DEBUG, or with `--log-tracebacks`.
"""

from __future__ import annotations

import logging

import pytest

from tests.conftest import wait_status
from tidegate import App
from tidegate.cli.worker import configure_logging
from tidegate.domain.model import RunStatus
from tidegate.worker import attempt_log


def boom() -> None:
    raise ValueError("no such customer")


def lines_of(caplog: pytest.LogCaptureFixture, run_id: str, level: int) -> list[str]:
    return [
        record.getMessage() for record in caplog.records if run_id in record.getMessage() and record.levelno == level
    ]


def test_each_attempt_outcome_is_one_info_line_and_the_traceback_is_debug(app: App, start_worker, caplog) -> None:
    failing = app.task(name="jobs.boom", max_attempts=2, retry_backoff=0.01)(boom)
    fine = app.task(name="jobs.fine")(lambda: 42)
    caplog.set_level(logging.INFO, logger="tidegate.worker")
    bad, good = failing.submit().id, fine.submit().id
    start_worker(max_workers=2)
    wait_status(app, bad, RunStatus.FAILED)
    wait_status(app, good, RunStatus.COMPLETED)
    failed = lines_of(caplog, bad, logging.INFO)
    assert len(failed) == 2, failed
    assert failed[0].startswith(f"run {bad} task=jobs.boom attempt=1/2 failed after ")
    assert ": ValueError: no such customer (will retry in " in failed[0]
    assert failed[1].startswith(f"run {bad} task=jobs.boom attempt=2/2 failed after ")
    assert failed[1].endswith("ValueError: no such customer (no attempt left)")
    [completed] = lines_of(caplog, good, logging.INFO)
    assert completed.startswith(f"run {good} task=jobs.fine attempt=1/1 completed in ")
    assert not any("Traceback" in record.getMessage() for record in caplog.records if record.levelno >= logging.INFO)


def test_log_tracebacks_shows_a_failure_s_traceback_without_debug_elsewhere(app: App, start_worker, caplog) -> None:
    failing = app.task(name="jobs.boom")(boom)
    before = attempt_log.tracebacks.level
    try:
        configure_logging("info", tracebacks=True)
        caplog.set_level(logging.INFO, logger="tidegate.worker")
        caplog.handler.setLevel(logging.NOTSET)  # the capture keeps what the loggers let through
        run_id = failing.submit().id
        start_worker()
        wait_status(app, run_id, RunStatus.FAILED)
    finally:
        attempt_log.tracebacks.setLevel(before)
    [trace] = [record for record in caplog.records if record.name == "tidegate.worker.tracebacks"]
    assert trace.levelno == logging.DEBUG and run_id in trace.getMessage() and "Traceback" in trace.getMessage()
    assert logging.getLogger("tidegate.worker").getEffectiveLevel() == logging.INFO
