"""A run's attempts as the code declared them, with the uncharged ones in words (issue 28), on both backends.

The store's `max_attempts` is the budget in force, grown by every attempt that
did not count; each face shows the declared budget instead, and says what
grew it (domain/attempts.py): `runs show`, `runs list`, the API's run and the
dashboard's run page and runs list.
"""

from __future__ import annotations

import re
from typing import Any

from fastapi.testclient import TestClient
from typer.testing import CliRunner

from tidegate import App, Context, RunStatus
from tidegate.api import Tokens, create_api
from tidegate.cli.main import app as cli
from tidegate.domain.clock import ShiftedClock
from tidegate.domain.model import CycleRequest, Outcome, OutcomeKind, WorkerRegistration

LEASE = 5.0
NOTHING_ELSE = {"worker_shutdown": 0, "lost_worker": 0, "snooze": 0}


def invoke(*args: str) -> Any:
    result = CliRunner().invoke(cli, list(args), env={"COLUMNS": "200", "NO_COLOR": "1"})
    assert result.exit_code == 0, result.output
    return result


def _shown_attempt(database_url: str, run_id: str) -> str:
    shown = invoke("runs", "show", run_id, "--database", database_url).stdout
    [line] = [line.strip() for line in shown.splitlines() if line.strip().startswith("attempt ")]
    return line.removeprefix("attempt").strip()


def _listed_try(database_url: str, run_id: str) -> str:
    listed = invoke("runs", "list", "--database", database_url).stdout
    [row] = [line for line in listed.splitlines() if line.startswith(run_id)]
    found = re.search(r"\s(\d+/\d+(?: \+\d+)?)\s", row)
    assert found, row
    return found.group(1)


def _browser(app: App) -> TestClient:
    return TestClient(create_api(app, tokens=Tokens()), base_url="http://127.0.0.1")


def test_a_task_allowing_one_attempt_after_a_child_wait(app: App, database_url: str, start_worker) -> None:
    @app.task(name="t.child", queue="children")
    def child(n: int) -> int:
        return n * 2

    @app.task(name="t.parent", max_attempts=1)
    def parent(ctx: Context) -> int:
        return ctx.trigger_and_wait(child, n=21)

    handle = parent.submit()
    start_worker(queues=["default", "children"])
    assert handle.wait(timeout=30) == 42
    run = handle.info()
    assert (run.attempt, run.max_attempts, run.declared_max_attempts) == (2, 2, 1)
    assert run.uncharged_attempts == {"child_wait": 1, **NOTHING_ELSE} and run.manual_retries == 0

    words = "2 of 1 allowed, +1 not charged (a child wait)"
    assert _shown_attempt(database_url, handle.id) == words
    assert _listed_try(database_url, handle.id) == "2/1 +1"
    browser = _browser(app)
    body = browser.get(f"/api/v1/runs/{handle.id}").json()
    assert (body["attempt"], body["max_attempts"], body["declared_max_attempts"]) == (2, 2, 1)
    assert body["uncharged_attempts"] == {"child_wait": 1, **NOTHING_ELSE} and body["manual_retries"] == 0
    assert f'<dd data-testid="attempts">{words}</dd>' in browser.get(f"/runs/{handle.id}").text


def test_a_rescued_run_of_a_task_allowing_three(app: App, database_url: str, clock: ShiftedClock) -> None:
    """Two runs lost with their worker, neither started: neither is charged, both come back."""
    job = app.task(name="t.crunch", max_attempts=3)(lambda: None)
    run_id, other = job.submit().id, job.submit().id
    app.store.register_worker(WorkerRegistration("w-gone", 2, ["default"], False, LEASE))
    assert len(app.store.cycle(CycleRequest("w-gone", ["default"], [], [], 2, LEASE)).claimed) == 2
    clock.advance(LEASE + 1)
    report = app.store.sweep("sweeper", 1.0)
    assert report is not None
    assert {run.status for run in map(app.store.get_run, (run_id, other)) if run} == {RunStatus.QUEUED}
    app.store.register_worker(WorkerRegistration("w-new", 2, ["default"], False, LEASE))
    claimed = app.store.cycle(CycleRequest("w-new", ["default"], [], [], 2, LEASE)).claimed
    if run_id not in {run.id for run in claimed}:  # a worker takes one group of suspects at a time
        done = [Outcome(run.id, run.attempt, OutcomeKind.COMPLETED) for run in claimed]
        claimed = app.store.cycle(
            CycleRequest("w-new", ["default"], [run.fence for run in claimed], done, 2, LEASE)
        ).claimed
    assert [(run.id, run.attempt) for run in claimed] == [(run_id, 2)]

    run = app.store.get_run(run_id)
    assert run is not None
    assert (run.attempt, run.max_attempts, run.declared_max_attempts) == (2, 4, 3)
    assert run.uncharged_attempts == {"child_wait": 0, "worker_shutdown": 0, "lost_worker": 1, "snooze": 0}
    assert _shown_attempt(database_url, run_id) == "2 of 3 allowed, +1 not charged (a lost worker)"
    assert _listed_try(database_url, run_id) == "2/3 +1"
    browser = _browser(app)
    body = browser.get(f"/api/v1/runs/{run_id}").json()
    assert (body["max_attempts"], body["declared_max_attempts"], body["uncharged_attempts"]["lost_worker"]) == (4, 3, 1)
    cell = r'title="2 of 3 allowed, \+1 not charged \(a lost worker\)">2/3 \+1<'
    assert re.search(rf"{run_id}.*?{cell}", browser.get("/runs").text, re.S)
