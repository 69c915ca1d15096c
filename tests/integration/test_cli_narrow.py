"""At 80 columns no identifier wraps, and every list and show command has `--json` (issue 15 item 7).

The state is the demo's shape (a partitioned queue with a per-customer
override, a per-value tag limit, a worker with a long host name), rendered by
each command to an 80-column console. Every run id, scope key, queue name and
worker id must appear whole on one line, and no line may be wider than 80.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from typer.testing import CliRunner

from tidegate import App, Concurrency, Partition, RunQueueConfig
from tidegate.cli.main import app as cli
from tidegate.domain.limits import TagConcurrencyLimit
from tidegate.domain.model import CycleRequest, RunStatus, WorkerRegistration

WIDTH = 80
WORKER = "build-host.example.internal:12345:abcdef12"


def invoke(*args: str) -> Any:
    result = CliRunner().invoke(cli, list(args), env={"COLUMNS": str(WIDTH), "NO_COLOR": "1"})
    assert result.exit_code == 0, result.output
    return result


@pytest.fixture
def busy(database_url: str):
    config = RunQueueConfig(
        max_concurrent_runs=12,
        tag_concurrency_limits=[TagConcurrencyLimit(key="tenant", per_unique_value=True, limit=2)],
    )
    with App(database_url, run_queue=config) as app:
        app.queue(
            "external_api",
            concurrency=Concurrency(
                global_limit=2, partition=Partition(by_args=["customer_id"]), overrides={"customer_id=1": 4}
            ),
        )
        sync = app.task(name="sync_customer", queue="external_api")(lambda customer_id: None)
        ids = [
            sync.options(tags={"tenant": f"tenant-{customer}"}).submit(customer_id=customer).id
            for customer in (1, 1, 1, 1, 1, 42, 42, 42, 7)
        ]
        app.store.register_worker(WorkerRegistration(WORKER, 8, ["external_api", "default"], False, 60))
        app.store.cycle(CycleRequest(WORKER, ["external_api"], [], [], 8, 60))
        app.set_pool_limit("warehouse_db", 3)
        yield app, ids


def whole(output: str, identifiers: list[str]) -> None:
    lines = output.splitlines()
    assert all(len(line.rstrip()) <= WIDTH for line in lines), "\n".join(lines)
    for identifier in identifiers:
        assert any(identifier in line for line in lines), f"{identifier!r} is broken or missing:\n{output}"


def test_identifiers_never_wrap_at_80_columns(busy, database_url: str) -> None:
    app, ids = busy
    queued = [run.id for run in app.store.list_queued()]
    blocked = queued[-1]  # a customer 42 run: blocked by its partition and its tenant
    scopes = ["queue:external_api/customer_id=42", "tag:tenant=tenant-42", "queue:external_api/customer_id=1"]
    whole(invoke("limits", "list", "--database", database_url).stdout, [*scopes, "external_api", "customer_id"])
    whole(invoke("queue", "list", "--database", database_url).stdout, [*queued, scopes[0], "external_api"])
    whole(invoke("queue", "why", blocked, "--database", database_url).stdout, [blocked, "external_api"])
    whole(invoke("runs", "list", "--database", database_url).stdout, [*ids, "sync_customer", "external_api"])
    whole(invoke("workers", "list", "--database", database_url).stdout, [WORKER, "external_api"])
    whole(invoke("pools", "list", "--database", database_url).stdout, ["warehouse_db"])
    whole(invoke("runs", "show", blocked, "--database", database_url).stdout, [blocked, "sync_customer"])
    [running, *_] = [run.id for run in app.store.page_runs(status=RunStatus.RUNNING)]
    whole(invoke("runs", "show", running, "--database", database_url).stdout, [running, f"worker={WORKER}"])


def test_every_list_and_show_command_prints_json(busy, database_url: str) -> None:
    _, ids = busy
    commands = {
        ("runs", "list"): "runs",
        ("runs", "show", ids[0]): "id",
        ("queue", "list"): "runs",
        ("queue", "why", ids[-1]): "run",
        ("limits", "list"): "limits",
        ("pools", "list"): "pools",
        ("pools", "info", "warehouse_db"): "holders",
        ("workers", "list"): "workers",
    }
    for command, key in commands.items():
        document = json.loads(invoke(*command, "--json", "--database", database_url).stdout)
        assert key in document, (command, document)
