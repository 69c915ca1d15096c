"""One table of limits (issue 24 item 6, issue 28): `tidegate limits list --json`, `GET /api/v1/limits`
and the dashboard's limits page show the same rows, and each shows the admission ceilings
(`max_active`) with the active runs counted against them, on both backends.
"""

from __future__ import annotations

import json
import re
from typing import Any

from fastapi.testclient import TestClient
from typer.testing import CliRunner

from tidegate import App, Concurrency, Partition, RunQueueConfig, RunStatus
from tidegate.api import Tokens, create_api
from tidegate.cli.main import app as cli
from tidegate.domain.limits import TagConcurrencyLimit
from tidegate.domain.model import CycleRequest

WORKER = "w-table"


def invoke(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args), env={"COLUMNS": "200", "NO_COLOR": "1"})


def _scene(database_url: str) -> App:
    """A partitioned queue `api` (ceiling 5) with one run running and two queued, a per-value tag
    limit, a live override of one partition, and a global ceiling of 10."""
    config = RunQueueConfig(
        max_active=10,
        tag_concurrency_limits=[TagConcurrencyLimit(key="tenant", limit=2, per_unique_value=True)],
    )
    app = App(database_url, run_queue=config)
    app.queue("api", concurrency=Concurrency(global_limit=1, partition=Partition(by_args=["customer"])), max_active=5)

    @app.task(name="call", queue="api", tags={"tenant": "acme"})
    def call(customer: int) -> None:
        return None

    for _ in range(3):
        app.submit("call", {"customer": 1})
    app.store.cycle(CycleRequest(WORKER, ["api"], [], [], 3, 60))
    app.store.set_limit("queue:api/customer=2", 4)
    return app


def test_the_cli_the_api_and_the_dashboard_show_one_table_with_the_ceilings(database_url: str) -> None:
    app = _scene(database_url)
    try:
        assert [app.store.get_run(run.id).status for run in app.store.list_queued()].count(RunStatus.QUEUED) == 2
        printed = invoke("limits", "list", "--json", "--database", database_url)
        assert printed.exit_code == 0, printed.output
        from_cli = json.loads(printed.stdout)
        from_api = TestClient(create_api(app, tokens=Tokens()), base_url="http://127.0.0.1").get("/api/v1/limits")
        assert from_api.status_code == 200, from_api.text
        assert from_cli["limits"] == from_api.json()["limits"]
        assert (
            from_cli["ceilings"]
            == from_api.json()["ceilings"]
            == [
                {"queue": None, "max_active": 10, "active": 3},
                {"queue": "api", "max_active": 5, "active": 3},
            ]
        )
        rows = {row["target"]: row for row in from_api.json()["limits"]}
        assert rows["queue:api"]["used"] is None  # partitioned: each partition is a scope of its own
        assert (rows["queue:api/customer=1"]["used"], rows["queue:api/customer=1"]["parent"]) == (1, "queue:api")
        assert (rows["queue:api/customer=2"]["live"], rows["queue:api/customer=2"]["version"]) == (True, 1)
        assert rows["tag:tenant=acme"]["parent"] == "tag:tenant"

        table = invoke("limits", "list", "--database", database_url).stdout
        assert "admission ceilings (max_active)" in table
        lines = [" ".join(line.split()) for line in table.splitlines()]
        assert "all queues 3/10" in lines and "queue api 3/5" in lines

        page = TestClient(create_api(app, tokens=Tokens()), base_url="http://127.0.0.1").get("/limits").text
        scopes, ceilings = (
            page[page.index('id="scopes-title"') : page.index('id="ceilings"')],
            page[page.index('id="ceilings"') :],
        )
        assert re.search(r"queue api</td>\s*<td>.*?3/5</td>", ceilings, re.S)
        shown = re.findall(r'<td class="mono">([^<]+)</td>', scopes)
        assert shown == [row["target"] for row in from_api.json()["limits"]]
    finally:
        app.close()


def _signed_in(app: App) -> tuple[TestClient, str]:
    browser = TestClient(create_api(app, tokens=Tokens()), base_url="http://127.0.0.1")
    token = re.search(r'name="form_token" value="([0-9a-f]+)"', browser.get("/limits").text)
    assert token is not None
    return browser, token.group(1)


def test_the_dashboard_reads_a_limit_as_the_cli_does_a_number_never_lifts_it(database_url: str) -> None:
    with App(database_url, run_queue=RunQueueConfig(max_concurrent_runs=4)) as app:
        app.enqueue([])
        browser, token = _signed_in(app)
        for typed in ("-1", "", "2.5"):
            refused = browser.post("/limits/set", data={"form_token": token, "target": "global", "limit": typed})
            assert refused.status_code == 422, typed
            assert app.store.rules().global_limit() == 4  # nothing changed
        assert "is not valid: use a whole number" in refused.text
        lifted = browser.post("/limits/set", data={"form_token": token, "target": "global", "limit": "unlimited"})
        assert lifted.status_code in (200, 303) and app.store.rules().global_limit() is None


def test_a_pool_change_without_a_lease_keeps_the_pool_s_own_at_every_door(database_url: str) -> None:
    with App(database_url) as app:
        app.set_pool_limit("gpu", 2, lease_duration="45s")
        app.enqueue([])
        browser, token = _signed_in(app)
        done = browser.post("/pools/gpu", data={"form_token": token, "limit": "5", "lease": ""}, follow_redirects=False)
        assert done.status_code == 303, done.text
        (gpu,) = [pool for pool in app.store.pools() if pool.name == "gpu"]
        assert (gpu.limit, gpu.lease_seconds) == (5, 45.0)
        assert invoke("pools", "set", "gpu", "6", "--database", database_url).exit_code == 0
        api = TestClient(create_api(app, tokens=Tokens()), base_url="http://127.0.0.1")
        assert api.put("/api/v1/pools/gpu", json={"limit": 7}).json()["lease_seconds"] == 45.0
        refused = api.put("/api/v1/pools/gpu", json={"limit": 7, "lease_duration": "1ms"})
        assert refused.status_code == 422 and refused.json()["field"] == "lease_duration"
        (gpu,) = [pool for pool in app.store.pools() if pool.name == "gpu"]
        assert (gpu.limit, gpu.lease_seconds) == (7, 45.0)
