"""A waiting parent explained: `queue why`, `GET /runs/{id}/why`, `runs show` and `GET /runs/{id}` (issue 13).

The parent waits on children of a queue no worker serves, so it stays waiting
while the explanations are read; on both backends.
"""

from __future__ import annotations

from typing import Any

import pytest
from typer.testing import CliRunner

from tests.apps.api import local_client
from tidegate import App, Concurrency, Context, Executor, RunQueueConfig, RunStatus, Workflow
from tidegate.api.application import create_api
from tidegate.cli.main import app as cli

from .conftest import wait_status


def invoke(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args), env={"COLUMNS": "250", "NO_COLOR": "1"})


@pytest.fixture
def waiting_app(database_url, clock):
    """The app, closed after the test's workers stopped (set up before `start_worker`)."""
    app = App(database_url, run_queue=RunQueueConfig(max_concurrent_runs=2), clock=clock)
    yield app
    app.close()


def _waiting_parent(app: App, start_worker) -> str:
    app.queue("reports", concurrency=Concurrency(global_limit=2))
    app.queue("idle")

    @app.task(name="render", queue="reports")
    def render(part: int) -> int:
        return part

    @app.task(name="monthly", queue="reports")
    def monthly(ctx: Context) -> int:
        ctx.trigger(render.options(queue="idle"), part=99)  # fire and forget: not waited for
        return sum(ctx.batch_trigger_and_wait(render.options(queue="idle"), [{"part": p} for p in range(3)]))

    handle = monthly.submit()
    start_worker(app, max_workers=1, queues=["reports"])
    wait_status(app, handle.id, RunStatus.WAITING)
    return handle.id


def _lines(output: str) -> list[str]:
    return [" ".join(line.split()) for line in output.splitlines()]


def test_queue_why_and_the_api_say_what_a_waiting_parent_waits_for_and_released(
    database_url, waiting_app, start_worker
):
    app = waiting_app
    run_id = _waiting_parent(app, start_worker)
    result = invoke("queue", "why", run_id, "--database", database_url)
    assert result.exit_code == 0, result.output
    lines = _lines(result.stdout)
    assert f"Run {run_id} (monthly) is waiting for 3 children (3 queued)" in lines
    released = next(line for line in lines if line.startswith("Released while waiting:"))
    assert "max_concurrent_runs" in released and "queue reports" not in released
    assert "queue reports" in next(line for line in lines if line.startswith("Kept while waiting:"))
    assert "Resumes: queued again once they have all ended" in lines

    client = local_client(create_api(app))
    why = client.get(f"/api/v1/runs/{run_id}/why").json()
    assert why["status"] == "waiting" and why["waiting_for"] == "3 children (3 queued)"
    assert why["released"] == ["global"] and why["kept"] == ["queue:reports"]
    assert why["resumes_when"] == "all"
    shown = client.get(f"/api/v1/runs/{run_id}").json()
    assert [(c["index"], c["task"], c["queue"], c["awaited"]) for c in shown["children"]] == [
        (0, "render", "idle", False),
        (1, "render", "idle", True),
        (2, "render", "idle", True),
        (3, "render", "idle", True),
    ]
    child = client.get(f"/api/v1/runs/{shown['children'][1]['id']}").json()
    assert (child["parent_id"], child["root_id"], child["depth"]) == (run_id, run_id, 1)

    result = invoke("runs", "show", run_id, "--database", database_url)
    assert result.exit_code == 0, result.output
    assert "children" in result.stdout and "no (fire and forget)" in result.stdout
    assert "RunWaiting" in result.stdout and "ChildTriggered" in result.stdout


def test_a_window_of_children_says_it_resumes_when_any_of_them_ends(database_url, waiting_app, start_worker):
    """`map_children(concurrency=k)` waits on any of its window, not all of it: every view says so."""
    app = waiting_app
    app.queue("idle")

    @app.task(name="load", queue="idle")
    def load(day: int) -> int:
        return day

    @app.workflow(name="nightly", queue="etl", executor=Executor.in_process())
    def nightly(wf: Workflow) -> list[int]:
        return wf.map_children(load, [1, 2, 3, 4], concurrency=2)

    handle = nightly.submit()
    start_worker(app, max_workers=1, queues=["etl"])
    wait_status(app, handle.id, RunStatus.WAITING)

    result = invoke("queue", "why", handle.id, "--database", database_url)
    assert result.exit_code == 0, result.output
    assert "Resumes: queued again when any of them ends" in _lines(result.stdout)
    why = local_client(create_api(app)).get(f"/api/v1/runs/{handle.id}/why").json()
    assert why["waiting_for"] == "2 children (2 queued)" and why["resumes_when"] == "any"
