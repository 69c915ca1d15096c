"""`GET /api/v1/tasks`: the registered tasks as `tidegate tasks list --json` shows them, on both backends.

The answer is the engine's `task_views`, the same the CLI prints: name, queue,
parameters, the limits their runs meet (live overrides included), the worker
that last registered each and when.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from typer.testing import CliRunner

from tests.apps.api import local_client, store_size
from tidegate import App, Concurrency, Partition
from tidegate.api import Tokens, create_api
from tidegate.cli.main import app as cli
from tidegate.engine.operators.limits import set_limit

TIMES = ("worker_seen_at", "registered_at")


def _declare(app: App) -> str:
    """Two tasks, one in a partitioned queue; a worker (created, not started) registers them. Its id."""
    app.queue("api", concurrency=Concurrency(global_limit=2, partition=Partition(by_args=["customer_id"])))

    @app.task(name="tasks.add")
    def add(x: int, y: int = 2) -> int:
        return x + y

    @app.task(name="tasks.sync_customer", queue="api", tags={"env": "prod"}, max_attempts=3)
    def sync_customer(customer_id: int, *, full: bool = False) -> None:
        return None

    return app.worker().id


def _same_times(listed: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Times as instants: the CLI prints `+00:00`, the API `Z`."""
    return [
        {**task, **{key: None if task[key] is None else datetime.fromisoformat(task[key]) for key in TIMES}}
        for task in listed
    ]


def test_tasks_are_listed_as_the_cli_lists_them_with_their_limits_and_last_worker(app: App, database_url: str) -> None:
    worker_id = _declare(app)
    client = local_client(app.asgi())
    answer = client.get("/api/v1/tasks")
    assert answer.status_code == 200, answer.text
    tasks = answer.json()["tasks"]
    assert [task["name"] for task in tasks] == ["tasks.add", "tasks.sync_customer"]
    sync = tasks[1]
    assert (sync["queue"], sync["worker"], sync["max_attempts"], sync["tags"]) == ("api", worker_id, 3, {"env": "prod"})
    assert sync["signature"] == "customer_id: int, *, full: bool = False"
    assert [item["name"] for item in sync["parameters"]["parameters"]] == ["customer_id", "full"]
    queue_limit = next(limit for limit in sync["limits"] if limit["name"] == "queue:api")
    assert (queue_limit["limit"], queue_limit["kind"], queue_limit["per"]) == (2, "scope", "customer_id")

    set_limit(app.store, "queue:api", 7)  # a live override: both read the rules in force
    printed = CliRunner().invoke(cli, ["tasks", "list", "--json", "--database", database_url])
    assert printed.exit_code == 0, printed.output
    listed = client.get("/api/v1/tasks").json()["tasks"]
    assert next(limit for limit in listed[1]["limits"] if limit["name"] == "queue:api")["limit"] == 7
    assert _same_times(listed) == _same_times(json.loads(printed.stdout)["tasks"])

    only = client.get("/api/v1/tasks", params={"queue": "api"}).json()["tasks"]
    assert [task["name"] for task in only] == ["tasks.sync_customer"]


def test_a_paused_queue_s_task_says_so_and_a_bad_queue_filter_is_refused(app: App, database_url: str) -> None:
    _declare(app)
    client = local_client(app.asgi())
    assert client.post("/api/v1/queues/api/pause").status_code == 200
    paused = {task["name"]: task["paused"] for task in client.get("/api/v1/tasks").json()["tasks"]}
    assert paused == {"tasks.add": False, "tasks.sync_customer": True}
    before = store_size(database_url)
    refused = client.get("/api/v1/tasks", params={"queue": "bad name"})
    assert refused.status_code == 422 and refused.json()["field"] == "queue", refused.text
    assert set(refused.json()) == {"error", "detail", "field"}
    assert store_size(database_url) == before


def test_the_read_token_lists_tasks_and_no_token_is_refused(app: App) -> None:
    _declare(app)
    client = local_client(create_api(app, tokens=Tokens(full="full-token", read="read-token")))
    assert client.get("/api/v1/tasks", headers={"Authorization": "Bearer read-token"}).status_code == 200
    assert client.get("/api/v1/tasks").status_code == 401
