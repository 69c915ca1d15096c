"""An adaptive limit shown with its reason on every surface, on both backends (issue 25).

`tidegate limits list` (table and `--json`), `GET /api/v1/limits` (the row's `adaptive`), the
dashboard's `/limits`, `queue why` and `/metrics` (`tidegate_scope_adaptive_limit`) all name the
effective limit and why it last moved; the limit in force is the effective one until a live
override wins.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi.testclient import TestClient
from typer.testing import CliRunner

from tidegate import Adaptive, App, Concurrency
from tidegate.api import Tokens, create_api
from tidegate.cli.main import app as cli
from tidegate.domain.model import CycleRequest, Outcome, OutcomeKind

LEASE = 30.0


def invoke(*args: str) -> Any:
    result = CliRunner().invoke(cli, list(args), env={"COLUMNS": "250", "NO_COLOR": "1"})
    assert result.exit_code == 0, result.output
    return result


def test_every_surface_names_the_adaptive_limit_and_its_reason(app: App, database_url: str) -> None:
    app.queue("partner", concurrency=Concurrency(global_limit=4), adaptive=Adaptive(min=1, decrease=0.5))
    job = app.task(name="t.partner", queue="partner")(lambda: None)
    store = app.store
    job.submit()
    [claimed] = store.cycle(CycleRequest("w1", ["partner"], [], [], 1, LEASE)).claimed
    overloaded = Outcome(claimed.id, claimed.attempt, OutcomeKind.SNOOZED, retry_delay=3600.0, overloaded=True)
    store.cycle(CycleRequest("w1", ["partner"], [claimed.fence], [overloaded], 0, LEASE))  # 4 -> 2
    handles = [job.submit() for _ in range(3)]
    assert (
        len(store.cycle(CycleRequest("w1", ["partner"], [], [], 4, LEASE)).claimed) == 2
    )  # the lowered limit, exactly
    assert store.rules().queue_limit("partner", "") == 2
    words = "adaptive 2 of 4 (overloaded)"

    assert words in invoke("limits", "list", "--database", database_url).stdout
    listed = json.loads(invoke("limits", "list", "--json", "--database", database_url).stdout)
    row = next(row for row in listed["limits"] if row["target"] == "queue:partner")
    assert (row["limit"], row["code_limit"], row["adaptive"]) == (2, 4, words)

    client = TestClient(create_api(app, tokens=Tokens()), base_url="http://127.0.0.1")
    api_row = next(row for row in client.get("/api/v1/limits").json()["limits"] if row["target"] == "queue:partner")
    assert (api_row["limit"], api_row["adaptive"]) == (2, words)
    assert f'data-testid="adaptive">{words}<' in client.get("/limits").text
    metrics = client.get("/metrics").text
    assert 'tidegate_scope_adaptive_limit{reason="overloaded",scope="queue:partner"} 2.0' in metrics

    [blocked] = [handle for handle in handles if handle.info().status.value == "queued"]
    why = invoke("queue", "why", blocked.id, "--database", database_url).stdout
    assert f"queue partner ({words})" in why

    invoke("limits", "set", "queue:partner", "3", "--database", database_url)
    assert store.rules().queue_limit("partner", "") == 3  # a live override wins
