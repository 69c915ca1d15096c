"""Stuck runs (issue 15 item 6), `runs retry`, `workers list` and the `runs list` filters, on both backends.

A run is stuck when its worker stopped renewing its lease (here: a worker that
claims, starts, then never calls the store again, as after `kill -9`). The
lease and heartbeat are short, real-time ones, because the CLI judges
"expired" by the real clock and its `sweep` uses the store's real clock.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

from typer.testing import CliRunner

from tests.conftest import wait_until
from tidegate import App
from tidegate.cli.main import app as cli
from tidegate.domain.model import CycleRequest, WorkerRegistration

WORKER = "host-a:4242:abcd1234"
LEASE = 0.3  # seconds: the killed worker's lease and registry heartbeat


def invoke(*args: str, columns: int = 200) -> Any:
    return CliRunner().invoke(cli, list(args), env={"COLUMNS": str(columns), "NO_COLOR": "1"})


def killed_worker_run(app: App, max_attempts: int = 3) -> str:
    """A run claimed and started by a worker that then died: its lease and heartbeat run out."""
    job = app.task(name="jobs.crunch", max_attempts=max_attempts)(lambda: None)
    run_id = job.submit().id
    app.store.register_worker(WorkerRegistration(WORKER, 2, ["default"], False, LEASE))
    [claimed] = app.store.cycle(CycleRequest(WORKER, ["default"], [], [], 1, LEASE)).claimed
    app.store.cycle(CycleRequest(WORKER, ["default"], [claimed.fence], [], 0, LEASE))  # its start is recorded
    run = app.store.get_run(run_id)
    assert run is not None and run.lease_expires_at is not None
    expiry = run.lease_expires_at
    wait_until(lambda: datetime.now(UTC) > expiry, message="the lease to expire")
    return run_id


def test_a_run_past_its_lease_is_shown_stuck_with_its_worker_s_heartbeat(app: App, database_url: str) -> None:
    run_id = killed_worker_run(app)
    listed = invoke("runs", "list", "--database", database_url)
    row = next(line for line in listed.stdout.splitlines() if line.startswith(run_id))
    assert re.split(r"\s+", row)[3] == "stuck"  # never plain "running"
    assert "recover with 'tidegate sweep'" in listed.stdout

    only = invoke("runs", "list", "--stuck", "--database", database_url)
    assert only.exit_code == 0, only.output
    [stuck_row] = [line.rstrip() for line in only.stdout.splitlines() if line.startswith(run_id)]
    assert re.search(r"\d+s ago\s+\d+s ago$", stuck_row), stuck_row  # lease expired, last heartbeat

    shown = invoke("runs", "show", run_id, "--database", database_url)
    assert "stuck: its lease expired" in shown.stdout and "last heartbeat" in shown.stdout

    [as_json] = json.loads(invoke("runs", "list", "--stuck", "--json", "--database", database_url).stdout)["runs"]
    assert as_json["id"] == run_id and as_json["stuck"] is True and as_json["last_heartbeat"] is not None


def test_sweep_recovers_a_stuck_run_without_a_worker(app: App, database_url: str) -> None:
    run_id = killed_worker_run(app)
    swept = invoke("sweep", "--database", database_url)
    assert swept.exit_code == 0, swept.output
    assert swept.stdout.strip() == f"re-queued 1 run(s): {run_id}"
    run = app.store.get_run(run_id)
    assert run is not None and run.status.value == "queued"
    assert invoke("runs", "list", "--stuck", "--database", database_url).stdout.strip() == "no stuck runs"


def test_the_time_an_attempt_was_lost_is_recorded_not_the_time_it_was_found(app: App, database_url: str) -> None:
    run_id = killed_worker_run(app, max_attempts=1)
    [worker] = [worker for worker in app.store.list_workers() if worker.id == WORKER]
    found_late = datetime.now(UTC)
    wait_until(lambda: (datetime.now(UTC) - found_late).total_seconds() > 1.0, message="a late sweep")
    assert invoke("sweep", "--database", database_url).exit_code == 0
    run = app.store.get_run(run_id)
    assert run is not None and run.status.value == "failed" and run.finished_at is not None
    failed = app.store.run_events(run_id)[-1]
    lost_at = datetime.fromisoformat(failed.metadata["lost_at"])
    assert lost_at == worker.heartbeat_at  # its last sign of life (before its lease ran out)
    assert datetime.fromisoformat(failed.metadata["last_heartbeat"]) == worker.heartbeat_at
    assert (run.finished_at - lost_at).total_seconds() > 1.0  # the sweep came later
    shown = invoke("runs", "show", run_id, "--database", database_url)
    assert "until it was lost at" in shown.stdout


def test_queue_why_marks_a_stuck_holder(app: App, database_url: str) -> None:
    from tidegate import Concurrency

    app.queue("narrow", concurrency=Concurrency(global_limit=1))
    job = app.task(name="jobs.narrow", queue="narrow")(lambda: None)
    held = job.submit().id
    waiting = job.submit().id
    app.store.register_worker(WorkerRegistration(WORKER, 2, ["narrow"], False, LEASE))
    [claimed] = app.store.cycle(CycleRequest(WORKER, ["narrow"], [], [], 1, LEASE)).claimed
    assert claimed.id == held
    run = app.store.get_run(held)
    assert run is not None and run.lease_expires_at is not None
    expiry = run.lease_expires_at
    wait_until(lambda: datetime.now(UTC) > expiry, message="the lease to expire")
    why = invoke("queue", "why", waiting, "--database", database_url)
    assert f"{held} (stuck: lease expired" in why.stdout, why.stdout


def test_runs_retry_gives_a_failed_run_another_attempt_keeping_its_history(app: App, database_url: str) -> None:
    run_id = killed_worker_run(app, max_attempts=1)
    assert invoke("sweep", "--database", database_url).exit_code == 0
    retried = invoke("runs", "retry", run_id, "--database", database_url)
    assert retried.exit_code == 0, retried.output
    next_attempt = "attempt 2 of 1 allowed, +1 by a manual retry next"
    assert retried.stdout.startswith(f"run {run_id} (jobs.crunch): queued  ({next_attempt}")
    types = [event.type for event in app.store.run_events(run_id)]
    assert types[-2:] == ["RunFailed", "RunRetriedManually"] and types[0] == "RunQueued"
    again = invoke("runs", "retry", run_id, "--database", database_url)
    assert again.exit_code == 1 and "only a failed or canceled run can be retried" in again.stderr


def test_workers_list_shows_host_pid_rank_busy_queues_and_heartbeat(app: App, database_url: str) -> None:
    killed_worker_run(app)
    listed = invoke("workers", "list", "--database", database_url)
    assert listed.exit_code == 0, listed.output
    row = next(line.rstrip() for line in listed.stdout.splitlines() if line.startswith(WORKER))
    assert re.split(r"\s+", row)[:6] == [WORKER, "host-a", "4242", "0", "1/2", "default"]
    assert row.endswith("ago (gone)")  # its heartbeat stopped
    [worker] = json.loads(invoke("workers", "list", "--json", "--database", database_url).stdout)["workers"]
    assert (worker["host"], worker["pid"], worker["busy"], worker["live"]) == ("host-a", 4242, 1, False)


def test_runs_list_filters_by_task_and_age(app: App, database_url: str) -> None:
    first = app.task(name="jobs.first")(lambda: None)
    second = app.task(name="jobs.second")(lambda: None)
    ids = [first.submit().id, second.submit().id, first.submit().id]
    listed = json.loads(invoke("runs", "list", "--task", "jobs.first", "--json", "--database", database_url).stdout)
    assert [run["id"] for run in listed["runs"]] == [ids[2], ids[0]]
    recent = invoke("runs", "list", "--task", "jobs.second", "--since", "1h", "--database", database_url)
    assert [line.split()[0] for line in recent.stdout.splitlines() if line.startswith("0")] == [ids[1]]
    assert invoke(
        "runs", "list", "--since", "1s", "--task", "jobs.none", "--database", database_url
    ).stdout.strip() == ("no runs matching")
    bad = invoke("runs", "list", "--since", "soon", "--database", database_url)
    assert bad.exit_code == 1 and "--since" in bad.stderr
