"""Every list, count and page says why a queued run waits as `queue why` does, on both backends.

The scenario of issue 23 (item 1): 100 `send_email(customer_id=11)` in a queue
partitioned by `customer_id` with limit 2, two of them running. A claim
records a block reason only for the runs it reads (its window: about ten
here), and a woken worker that finds the partition full only looks and reads
none, so most blocked runs never get a stored reason. Those runs are blocked
all the same: `queue list --json`, `GET /api/v1/queue`, `/queue`, the
overview's "Blocking the most runs", `/limits` and `/metrics` must all say so,
in the words of `queue why` (`GET /api/v1/runs/{id}/why`), while the one run of
customer 12, whose partition has room, is ready.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from tidegate import App, Concurrency, Partition, RunStatus
from tidegate.api import Tokens, create_api
from tidegate.cli.main import app as cli
from tidegate.domain.model import CycleRequest
from tidegate.engine.operators.why import explain

BLOCKED = 100
FULL = "queue:emails/customer_id=11"
HELD = [{"scope": FULL, "used": 2, "limit": 2}]


@dataclass
class Scenario:
    url: str
    app: App
    blocked: list[str]  # the 98 queued runs of customer 11
    ready: str  # the run of customer 12

    def client(self) -> TestClient:
        return TestClient(create_api(self.app, tokens=Tokens()), base_url="http://127.0.0.1")


@pytest.fixture
def scenario(database_url: str) -> Iterator[Scenario]:
    app = App(database_url)
    app.queue("emails", concurrency=Concurrency(global_limit=2, partition=Partition(by_args=["customer_id"])))

    @app.task(name="send_email", queue="emails")
    def send_email(customer_id: int) -> None:
        return None

    try:
        runs = [send_email.submit(customer_id=11).id for _ in range(BLOCKED)]
        ready = send_email.submit(customer_id=12).id
        claimed = app.store.cycle(CycleRequest("w1", ["emails"], [], [], 2, 60.0)).claimed
        assert sorted(run.id for run in claimed) == sorted(runs[:2])
        blocked = runs[2:]
        unread = [run_id for run_id in blocked if not app.store.get_run(run_id).block_reason]  # type: ignore[union-attr]
        assert len(unread) > BLOCKED // 2  # the claim read only its window: most have no stored reason
        yield Scenario(database_url, app, blocked, ready)
    finally:
        app.close()


def test_queue_list_json_names_the_full_partition_for_every_blocked_run(scenario: Scenario) -> None:
    shown = CliRunner().invoke(cli, ["queue", "list", "--json", "--limit", "500", "--database", scenario.url])
    assert shown.exit_code == 0, shown.output
    listed = {run["id"]: run for run in json.loads(shown.stdout)["runs"]}
    assert set(listed) == {*scenario.blocked, scenario.ready}
    assert {run_id: listed[run_id]["block_reason"] for run_id in scenario.blocked} == dict.fromkeys(
        scenario.blocked, HELD
    )
    assert listed[scenario.ready]["block_reason"] is None
    assert [listed[run_id]["position"] for run_id in scenario.blocked] == list(range(1, BLOCKED - 1))


def test_queue_list_table_counts_every_blocked_run(scenario: Scenario) -> None:
    shown = CliRunner().invoke(
        cli, ["queue", "list", "--limit", "500", "--database", scenario.url], env={"COLUMNS": "250", "NO_COLOR": "1"}
    )
    assert shown.exit_code == 0, shown.output
    assert shown.stdout.count(f"{FULL} 2/2") == BLOCKED - 2
    assert f"{BLOCKED - 2} held back by a limit" in shown.stdout


def test_the_api_queue_names_the_full_partition_for_every_blocked_run(scenario: Scenario) -> None:
    page = scenario.client().get("/api/v1/queue", params={"limit": 500}).json()
    reasons = {run["id"]: run["block_reason"] for run in page["runs"]}
    assert reasons == {**dict.fromkeys(scenario.blocked, HELD), scenario.ready: None}
    assert page["total"] == BLOCKED - 1


def test_the_queue_page_labels_only_the_ready_run_ready(scenario: Scenario) -> None:
    html = scenario.client().get("/queue").text
    assert html.count(f"{FULL} full (2/2)") == BLOCKED - 2
    assert html.count("ready: next free worker") == 1
    ready_row = re.search(rf'<tr data-run="{scenario.ready}">.*?</tr>', html, re.S)
    assert ready_row is not None and "ready: next free worker" in ready_row.group(0)


def test_the_overview_ranks_the_partition_by_every_run_it_blocks(scenario: Scenario) -> None:
    overview = scenario.client().get("/").text
    ranked = re.findall(r'class="mono" href="[^"]*">([^<]+)</a> <span class="badge s-failed">(\d+) blocked', overview)
    assert ranked == [(FULL, str(BLOCKED - 2))]


def test_limits_and_the_queues_api_count_every_blocked_run(scenario: Scenario) -> None:
    browser = scenario.client()
    limits = browser.get("/limits").text
    row = re.search(r'<a href="[^"]*/queue\?queue=emails">emails</a>.*?</tr>', limits, re.S)
    assert row is not None
    counts = re.findall(r'<td class="num">(\d+)</td>', row.group(0))
    assert counts == [str(BLOCKED - 1), "2", str(BLOCKED - 2)]  # queued, running, blocked
    (emails,) = browser.get("/api/v1/queues").json()["queues"]
    assert (emails["queued"], emails["running"], emails["blocked"]) == (BLOCKED - 1, 2, BLOCKED - 2)


def test_metrics_count_every_blocked_run_per_scope(scenario: Scenario) -> None:
    text = scenario.client().get("/metrics").text
    assert f'tidegate_scope_blocked_runs{{scope="{FULL}"}} {float(BLOCKED - 2)}' in text


def test_every_listed_reason_agrees_with_queue_why(scenario: Scenario) -> None:
    """For every queued run: the list's scopes are `queue why`'s blocking layers, in both renderings."""
    browser = scenario.client()
    listed = browser.get("/api/v1/queue", params={"limit": 500}).json()["runs"]
    store = scenario.app.store
    for run in listed:
        scopes = [held["scope"] for held in run["block_reason"] or []]
        assert [check.scope for check in explain(store, run["id"]).blocking] == scopes
        why = browser.get(f"/api/v1/runs/{run['id']}/why").json()
        assert (why["blocked_by"], why["paused"]) == (scopes, False)
        assert browser.get(f"/api/v1/runs/{run['id']}").json()["block_reason"] == run["block_reason"]
    assert store.get_run(scenario.ready).status is RunStatus.QUEUED  # nothing claimed meanwhile


def test_runs_show_and_list_json_and_the_run_page_say_why_it_waits_now(scenario: Scenario) -> None:
    unread = scenario.blocked[-1]  # far past any claim's window: no stored reason
    assert scenario.app.store.get_run(unread).block_reason is None  # type: ignore[union-attr]
    shown = CliRunner().invoke(cli, ["runs", "show", unread, "--json", "--database", scenario.url])
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.stdout)["block_reason"] == HELD
    listed = CliRunner().invoke(
        cli, ["runs", "list", "--status", "queued", "--json", "-n", "500", "--database", scenario.url]
    )
    assert listed.exit_code == 0, listed.output
    reasons = {run["id"]: run["block_reason"] for run in json.loads(listed.stdout)["runs"]}
    assert reasons == {**dict.fromkeys(scenario.blocked, HELD), scenario.ready: None}
    page = scenario.client().get(f"/runs/{unread}").text
    assert f"{FULL} full (2/2)" in page
