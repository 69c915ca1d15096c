"""Every surface names a rate-blocked queued run as `queue why` does, on both backends.

A queue with one start per minute per `key`: key a's first run started, its
other runs wait for the rate (no holder row, no full concurrency scope: only
the stored rate state says so), while key b's run is ready. `queue list`,
`GET /api/v1/queue`, `/queue`, `runs show`, the overview, `/limits`, the
queues API and `/metrics` must name `rate:api/key=a` with the next allowed
start, in the words of `queue why` (`GET /api/v1/runs/{id}/why`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from tidegate import App, Partition, Rate
from tidegate.api import Tokens, create_api
from tidegate.cli.main import app as cli
from tidegate.domain.model import CycleRequest
from tidegate.engine.operators.why import explain

BLOCKED = 30
SCOPE = "rate:api/key=a"
WAIT = re.compile(r"next start allowed in (\d+\.\d)s")


@dataclass
class Scenario:
    url: str
    app: App
    blocked: list[str]  # key a's queued runs
    ready: str  # key b's run

    def client(self) -> TestClient:
        return TestClient(create_api(self.app, tokens=Tokens()), base_url="http://127.0.0.1")


@pytest.fixture
def scenario(database_url: str) -> Iterator[Scenario]:
    app = App(database_url)
    app.queue("api", rate=Rate(limit=1, per="1m"), rate_partition=Partition(by_args=["key"]))

    @app.task(name="call", queue="api")
    def call(key: str) -> None:
        return None

    try:
        runs = [call.submit(key="a").id for _ in range(BLOCKED + 1)]
        claimed = app.store.cycle(CycleRequest("w1", ["api"], [], [], 1, 60.0)).claimed
        assert [run.id for run in claimed] == runs[:1]
        ready = call.submit(key="b").id
        yield Scenario(database_url, app, runs[1:], ready)
    finally:
        app.close()


def held(reason: list[dict[str, object]] | None) -> bool:
    """One item: the rate scope, its window full, and a wait within the minute."""
    if not reason or len(reason) != 1:
        return False
    (item,) = reason
    wait = item.get("next_allowed_in")
    return (
        (item["scope"], item["used"], item["limit"], item["per"]) == (SCOPE, 1, 1, 60.0)
        and isinstance(wait, float)
        and 0 < wait <= 60
        and WAIT.fullmatch(str(item["detail"])) is not None
    )


def test_the_lists_name_the_rate_for_every_blocked_run_and_the_other_key_is_ready(scenario: Scenario) -> None:
    shown = CliRunner().invoke(cli, ["queue", "list", "--json", "--limit", "500", "--database", scenario.url])
    assert shown.exit_code == 0, shown.output
    listed = {run["id"]: run["block_reason"] for run in json.loads(shown.stdout)["runs"]}
    assert set(listed) == {*scenario.blocked, scenario.ready}
    assert all(held(listed[run_id]) for run_id in scenario.blocked)
    assert listed[scenario.ready] is None
    page = scenario.client().get("/api/v1/queue", params={"limit": 500}).json()
    reasons = {run["id"]: run["block_reason"] for run in page["runs"]}
    assert all(held(reasons[run_id]) for run_id in scenario.blocked) and reasons[scenario.ready] is None
    html = scenario.client().get("/queue").text
    assert len(re.findall(rf"{SCOPE} 1 of 1 per 1m used; next start allowed in \d+\.\ds", html)) == BLOCKED
    assert html.count("ready: next free worker") == 1
    table = CliRunner().invoke(
        cli, ["queue", "list", "--limit", "500", "--database", scenario.url], env={"COLUMNS": "250", "NO_COLOR": "1"}
    )
    assert len(WAIT.findall(table.stdout)) == BLOCKED, table.stdout


def test_runs_show_and_the_run_page_say_when_the_rate_allows_it(scenario: Scenario) -> None:
    last = scenario.blocked[-1]
    shown = CliRunner().invoke(cli, ["runs", "show", last, "--json", "--database", scenario.url])
    assert shown.exit_code == 0, shown.output
    assert held(json.loads(shown.stdout)["block_reason"])
    assert re.search(rf"{SCOPE} 1 of 1 per 1m used; next start allowed in", scenario.client().get(f"/runs/{last}").text)


def test_the_counts_count_every_rate_blocked_run(scenario: Scenario) -> None:
    browser = scenario.client()
    (queue,) = browser.get("/api/v1/queues").json()["queues"]
    assert (queue["queued"], queue["running"], queue["blocked"]) == (BLOCKED + 1, 1, BLOCKED)
    assert f'tidegate_scope_blocked_runs{{scope="{SCOPE}"}} {float(BLOCKED)}' in browser.get("/metrics").text
    overview = browser.get("/").text
    ranked = re.findall(r'class="mono" href="[^"]*">([^<]+)</a> <span class="badge s-failed">(\d+) blocked', overview)
    assert ranked == [(SCOPE, str(BLOCKED))]
    row = re.search(r'<a href="[^"]*/queue\?queue=api">api</a>.*?</tr>', browser.get("/limits").text, re.S)
    assert row is not None
    assert re.findall(r'<td class="num">(\d+)</td>', row.group(0)) == [str(BLOCKED + 1), "1", str(BLOCKED)]


def test_queue_why_names_the_rate_with_the_next_allowed_start(scenario: Scenario) -> None:
    run_id = scenario.blocked[0]
    shown = CliRunner().invoke(
        cli, ["queue", "why", run_id, "--database", scenario.url], env={"COLUMNS": "200", "NO_COLOR": "1"}
    )
    assert shown.exit_code == 0, shown.output
    assert re.search(r"Blocked by: +rate api/key=a — 1 of 1 per 1m used; next start allowed in \d+\.\ds", shown.stdout)
    why = scenario.client().get(f"/api/v1/runs/{run_id}/why").json()
    assert why["blocked_by"] == [SCOPE] and 0 < why["eta_seconds"] <= 60
    (layer,) = [layer for layer in why["layers"] if layer["scope"] == SCOPE]
    assert layer["per"] == 60.0 and not layer["ok"] and 0 < layer["next_allowed_in"] <= 60
    ready = scenario.client().get(f"/api/v1/runs/{scenario.ready}/why").json()
    assert ready["blocked_by"] == [] and any(layer["scope"] == "rate:api/key=b" for layer in ready["layers"])


def test_every_listed_reason_agrees_with_queue_why(scenario: Scenario) -> None:
    browser = scenario.client()
    store = scenario.app.store
    for run in browser.get("/api/v1/queue", params={"limit": 500}).json()["runs"]:
        scopes = [item["scope"] for item in run["block_reason"] or []]
        assert [check.scope for check in explain(store, run["id"]).blocking] == scopes
        assert browser.get(f"/api/v1/runs/{run['id']}/why").json()["blocked_by"] == scopes


def test_metrics_export_each_rate_windows_tokens_used_and_limit(scenario: Scenario) -> None:
    """Key a's window counts its one start of the minute against its limit of 1; key b's rate was
    never charged (no stored state): no series for it."""
    text = scenario.client().get("/metrics").text
    assert f'tidegate_rate_tokens_used{{per="1m",scope="{SCOPE}"}} 1.0' in text
    assert f'tidegate_rate_tokens_limit{{per="1m",scope="{SCOPE}"}} 1.0' in text
    assert 'scope="rate:api/key=b"' not in text
