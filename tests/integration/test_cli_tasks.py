"""`tidegate tasks list` (issue 15 item 1): each registered task's name, queue, parameters, the limits
its runs meet (as the rules in force say, live overrides included) and the worker that last
registered it; `--json` for scripts; identifiers whole at 80 columns."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from typer.testing import CliRunner

from tidegate import App, Concurrency, Context, Partition, RunQueueConfig, TagConcurrencyLimit
from tidegate.cli.main import app as cli
from tidegate.engine.operators.limits import set_limit


def invoke(*args: str, columns: int = 80) -> Any:
    return CliRunner().invoke(cli, list(args), env={"COLUMNS": str(columns), "NO_COLOR": "1"})


@pytest.fixture
def code(database_url: str) -> Iterator[tuple[App, str]]:
    """An app declaring limits and two tasks; its worker (created, not started) registers them."""
    app = App(
        database_url,
        run_queue=RunQueueConfig(
            max_concurrent_runs=10,
            max_active=500,
            tag_concurrency_limits=[TagConcurrencyLimit(key="env", value="prod", limit=2)],
        ),
    )
    app.queue(
        "api", concurrency=Concurrency(global_limit=2, partition=Partition(by_args=["customer_id"])), max_active=15
    )

    @app.task(name="tasks.add")
    def add(x: int, y: int = 2) -> int:
        return x + y

    @app.task(name="tasks.sync_customer", queue="api", tags={"env": "prod"})
    def sync_customer(customer_id: int, ctx: Context, *, full: bool = False) -> None:
        return None

    worker = app.worker()
    try:
        yield app, worker.id
    finally:
        app.close()


def test_the_list_shows_each_task_its_parameters_limits_and_last_worker(code, database_url):
    _, worker_id = code
    result = invoke("tasks", "list", "--database", database_url, columns=250)
    assert result.exit_code == 0, result.output
    lines = [" ".join(line.split()) for line in result.stdout.splitlines()]
    assert lines[0] == "task queue parameters limits last worker"
    add = lines.index(f"tasks.add default x: int global 10 {worker_id}")
    assert lines[add + 1].startswith("y: int = 2 max_active 500 ")  # then the time it registered
    sync = lines.index(f"tasks.sync_customer api customer_id: int global 10 {worker_id}")
    assert lines[sync + 2 : sync + 5] == [
        "tag:env=prod 2",
        "max_active 500",
        "max_active(api) 15",
    ]
    assert lines[sync + 1].startswith("full: bool = False queue:api 2 per customer_id ")
    assert "ctx" not in result.stdout  # the Context is the worker's to fill, not an argument


def test_at_80_columns_every_identifier_stays_whole(code, database_url):
    _, worker_id = code
    result = invoke("tasks", "list", "--database", database_url, columns=80)
    assert result.exit_code == 0, result.output
    assert max(len(line) for line in result.stdout.splitlines()) <= 80
    rows = {line.split()[0]: line.split() for line in result.stdout.splitlines() if line.startswith("tasks.")}
    assert rows["tasks.add"][1] == "default" and rows["tasks.add"][-1] == worker_id
    assert rows["tasks.sync_customer"][1] == "api" and rows["tasks.sync_customer"][-1] == worker_id


def test_json_has_the_parameters_limits_and_worker(code, database_url):
    _, worker_id = code
    result = invoke("tasks", "list", "--json", "--database", database_url)
    assert result.exit_code == 0, result.output
    listed = {task["name"]: task for task in json.loads(result.stdout)["tasks"]}  # an object, as every list
    assert set(listed) == {"tasks.add", "tasks.sync_customer"}
    sync = listed["tasks.sync_customer"]
    assert (sync["queue"], sync["signature"], sync["worker"]) == (
        "api",
        "customer_id: int, *, full: bool = False",
        worker_id,
    )
    assert sync["worker_seen_at"] is not None
    assert [(limit["name"], limit["limit"], limit["per"]) for limit in sync["limits"]] == [
        ("global", 10, None),
        ("queue:api", 2, "customer_id"),
        ("tag:env=prod", 2, None),
        ("max_active", 500, None),
        ("max_active(api)", 15, None),
    ]
    assert [limit["name"] for limit in listed["tasks.add"]["limits"]] == ["global", "max_active"]
    assert listed["tasks.add"]["parameters"]["parameters"][0] == {
        "name": "x",
        "kind": "positional_or_keyword",
        "required": True,
        "types": ["integer"],
        "annotation": "int",
        "default": None,
    }


def test_a_live_limit_is_the_one_shown(code, database_url):
    app, _ = code
    set_limit(app.store, "queue:api", 5)
    set_limit(app.store, "global", None)
    printed = json.loads(invoke("tasks", "list", "--json", "-d", database_url).stdout)
    listed = {task["name"]: task for task in printed["tasks"]}
    names = {limit["name"]: limit["limit"] for limit in listed["tasks.sync_customer"]["limits"]}
    assert names["queue:api"] == 5
    assert "global" not in names


def test_a_task_no_worker_registered_says_so_and_the_queue_filter_narrows(database_url):
    with App(database_url) as app:

        @app.task(name="jobs.only_submitted", queue="q")
        def only_submitted() -> None:
            return None

        only_submitted.submit()  # registered by a submitter, not a worker
        result = invoke("tasks", "list", "-d", database_url)
        assert result.exit_code == 0, result.output
        [row] = [line for line in result.stdout.splitlines() if "jobs.only_submitted" in line]
        assert row.split()[1:] == ["q", "-", "none", "none", "yet"]
        only_q = json.loads(invoke("tasks", "list", "--json", "-q", "q", "-d", database_url).stdout)
        assert only_q["tasks"][0]["worker"] is None
        assert json.loads(invoke("tasks", "list", "--json", "-q", "other", "-d", database_url).stdout) == {"tasks": []}
        assert "no tasks registered in queue other" in invoke("tasks", "list", "-q", "other", "-d", database_url).stdout
