"""`tidegate schedules list|pause|resume|remove` and `tidegate db prune`, on both backends (issue 15)."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Any

from typer.testing import CliRunner

from tests.conftest import execute_sql
from tidegate import App, RunStatus
from tidegate.cli.main import app as cli

DAY = 86400.0


def invoke(*args: str, columns: int = 250) -> Any:
    return CliRunner().invoke(cli, list(args), env={"COLUMNS": str(columns), "NO_COLOR": "1"})


def declare(app: App) -> None:
    @app.task(name="reports.nightly_summary_for_every_customer")
    def nightly(region: str) -> str:
        return region

    app.schedule(nightly, cron="30 2 * * *", timezone="Europe/Paris", args={"region": "eu"}, name="nightly-eu")
    app.schedule(nightly, cron="*/5 * * * *", args={"region": "us"}, name="every-five-us", missed="catch_up")
    app.worker()  # stores the declarations


def test_schedules_list_shows_each_schedule_and_json_has_every_field(app: App, database_url: str) -> None:
    declare(app)
    result = invoke("schedules", "list", "--database", database_url, columns=80)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert any(line.split()[:3] == ["schedule", "task", "cron"] for line in lines[:3])
    row = next(line for line in lines if line.startswith("nightly-eu"))
    assert "reports.nightly_summary_for_every_customer" in row  # an identifier is never wrapped, even at 80
    listed = json.loads(invoke("schedules", "list", "--json", "--database", database_url).stdout)["schedules"]
    assert [schedule["name"] for schedule in listed] == ["every-five-us", "nightly-eu"]
    assert listed[1] | {"next_fire_at": None} == {
        "name": "nightly-eu",
        "task": "reports.nightly_summary_for_every_customer",
        "cron": "30 2 * * *",
        "timezone": "Europe/Paris",
        "args": {"region": "eu"},
        "missed": "skip",
        "paused": False,
        "next_fire_at": None,
        "last_fire_at": None,
        "last_run_id": None,
    }
    assert listed[1]["next_fire_at"].endswith("+00:00")


def test_pause_resume_and_remove_from_the_cli(app: App, database_url: str) -> None:
    declare(app)
    assert invoke("schedules", "pause", "nightly-eu", "--database", database_url).stdout.strip() == (
        "schedule nightly-eu paused"
    )
    again = invoke("schedules", "pause", "nightly-eu", "--database", database_url)
    assert "already paused" in again.stdout
    listed = json.loads(invoke("schedules", "list", "--json", "--database", database_url).stdout)["schedules"]
    assert [(schedule["name"], schedule["paused"]) for schedule in listed] == [
        ("every-five-us", False),
        ("nightly-eu", True),
    ]
    table = invoke("schedules", "list", "--database", database_url).stdout
    assert "paused" in next(line for line in table.splitlines() if line.startswith("nightly-eu"))
    assert "resumed" in invoke("schedules", "resume", "nightly-eu", "--database", database_url).stdout
    assert "removed" in invoke("schedules", "remove", "every-five-us", "--database", database_url).stdout
    missing = invoke("schedules", "pause", "every-five-us", "--database", database_url)
    assert missing.exit_code == 1
    assert missing.stderr.strip() == "error: no schedule named 'every-five-us' (tidegate schedules list shows them)"


def test_db_prune_deletes_old_finished_runs_and_says_how_many(app: App, database_url: str, backend: str) -> None:
    @app.task(name="p.work")
    def work() -> None:
        return None

    old = [work.submit().id for _ in range(3)]
    recent = work.submit().id
    for run_id in [*old[:2], recent]:
        app.store.cancel_run(run_id)
    forty_days_ago = time.time() - 40 * DAY
    ended = forty_days_ago if backend == "sqlite" else datetime.fromtimestamp(forty_days_ago, UTC)
    for run_id in old:  # old[2] is queued: its age must not matter
        execute_sql(
            database_url,
            "UPDATE tidegate_runs SET finished_at = ?, submitted_at = ? WHERE id = ?",
            (ended if run_id != old[2] else None, ended, run_id),
        )
    result = invoke("db", "prune", "--older-than", "30d", "--database", database_url)
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "pruned 2 finished runs older than 30d (4 events, 0 step rows, 0 schedule ticks)"
    assert [app.store.get_run(run_id) for run_id in old[:2]] == [None, None]
    assert app.store.get_run(old[2]).status is RunStatus.QUEUED
    assert app.store.get_run(recent).status is RunStatus.CANCELED
    again = invoke("db", "prune", "--older-than", "30d", "--database", database_url)
    assert again.stdout.startswith("pruned 0 finished runs")
    bad = invoke("db", "prune", "--older-than", "soon", "--database", database_url)
    assert bad.exit_code == 1 and bad.stderr.startswith("error: --older-than")
