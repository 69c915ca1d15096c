"""Stuck runs over HTTP, on both backends: flagged in `GET /runs` and `/runs/{id}`, listed by
`GET /runs?stuck=true` (and `since`, `task`), recovered by `POST /api/v1/sweep`; `GET /workers`
has the fields `tidegate workers list` shows.

A worker claims and starts a run, then never calls the store again (as after
`kill -9`); the app's clock is moved past its lease instead of sleeping it out.
The API judges "stuck" by the app's clock, with the rule the CLI uses
(`engine.operators.runs.is_stuck`).
"""

from __future__ import annotations

import json
from datetime import datetime

from typer.testing import CliRunner

from tests.apps.api import local_client, store_size
from tidegate import App, RunStatus
from tidegate.api import Tokens, create_api
from tidegate.cli.main import app as cli
from tidegate.domain.clock import wall_now
from tidegate.domain.model import CycleRequest, WorkerRegistration

DEAD, ALIVE = "host-a:4242:abcd1234", "host-b:77:ffff0000"
LEASE, LONG = 5.0, 3600.0  # seconds: the dead worker's lease (and heartbeat), the live one's


def _start(app: App, worker: str, ttl: float) -> str:
    """A run claimed and started by `worker`, its lease and registry entry `ttl` long."""
    run_id = app.submit("jobs.crunch").id
    app.store.register_worker(WorkerRegistration(worker, 2, ["default"], False, ttl))
    [claimed] = app.store.cycle(CycleRequest(worker, ["default"], [], [], 1, ttl)).claimed
    assert claimed.id == run_id
    app.store.cycle(CycleRequest(worker, ["default"], [claimed.fence], [], 0, ttl))  # its start is recorded
    return run_id


def _declare(app: App) -> None:
    app.task(name="jobs.crunch", max_attempts=3)(lambda: None)
    app.task(name="jobs.other")(lambda: None)


def test_a_run_past_its_lease_is_stuck_with_its_worker_s_last_heartbeat(app: App, clock) -> None:
    _declare(app)
    dead = _start(app, DEAD, LEASE)
    alive = _start(app, ALIVE, LONG)
    queued = app.submit("jobs.crunch").id
    client = local_client(app.asgi())
    before = client.get(f"/api/v1/runs/{dead}").json()
    assert (before["status"], before["stuck"], before["last_heartbeat"]) == ("running", False, None)
    assert before["lease_expires_at"] is not None
    assert client.get("/api/v1/runs", params={"stuck": "true"}).json()["runs"] == []

    clock.advance(2 * LEASE)
    shown = client.get(f"/api/v1/runs/{dead}").json()
    assert (shown["status"], shown["stuck"]) == ("running", True)
    [registered] = [worker for worker in app.store.list_workers() if worker.id == DEAD]
    assert datetime.fromisoformat(shown["last_heartbeat"]) == registered.heartbeat_at
    assert datetime.fromisoformat(shown["lease_expires_at"]) < wall_now(app.clock)
    page = {run["id"]: run for run in client.get("/api/v1/runs").json()["runs"]}
    assert {run_id: page[run_id]["stuck"] for run_id in (dead, alive, queued)} == {
        dead: True,
        alive: False,
        queued: False,
    }
    assert page[alive]["last_heartbeat"] is None
    only = client.get("/api/v1/runs", params={"stuck": "true"}).json()
    assert [run["id"] for run in only["runs"]] == [dead] and only["next_cursor"] is None
    assert client.get("/api/v1/runs", params={"stuck": "true", "task": "jobs.other"}).json()["runs"] == []
    assert client.get("/api/v1/runs", params={"stuck": "true", "status": "running"}).json()["runs"][0]["id"] == dead


def test_sweep_re_queues_a_stuck_run_and_a_read_token_may_not(app: App, clock) -> None:
    _declare(app)
    dead = _start(app, DEAD, LEASE)
    clock.advance(2 * LEASE)
    client = local_client(create_api(app, tokens=Tokens(full="full-token", read="read-token")))
    refused = client.post("/api/v1/sweep", headers={"Authorization": "Bearer read-token"})
    assert refused.status_code == 403 and refused.json()["error"] == "forbidden"
    assert app.store.get_run(dead).status is RunStatus.RUNNING

    swept = client.post("/api/v1/sweep", headers={"Authorization": "Bearer full-token"})
    assert swept.status_code == 200, swept.text
    assert swept.json() == {
        "swept": True,
        "requeued": [dead],
        "failed": [],
        "resumed": [],
        "leaks_repaired": 0,
        "step_slots_expired": 0,
        "unapplied": {},
    }
    assert app.store.get_run(dead).status is RunStatus.QUEUED
    read = {"Authorization": "Bearer read-token"}
    assert client.get("/api/v1/runs", params={"stuck": "true"}, headers=read).json()["runs"] == []


def test_a_sweep_while_a_worker_s_sweeper_holds_the_turn_does_nothing_and_says_so(app: App, clock) -> None:
    _declare(app)
    dead = _start(app, DEAD, LEASE)
    assert app.store.sweep("a-worker-sweeper", 60.0) is not None  # its turn lasts three intervals
    clock.advance(2 * LEASE)
    client = local_client(app.asgi())
    busy = client.post("/api/v1/sweep").json()
    assert busy["swept"] is False and busy["requeued"] == []
    assert app.store.get_run(dead).status is RunStatus.RUNNING
    clock.advance(180.0)
    assert client.post("/api/v1/sweep").json()["requeued"] == [dead]


def test_since_keeps_the_runs_submitted_within_the_window_page_by_page(app: App, clock) -> None:
    _declare(app)
    [app.submit("jobs.crunch") for _ in range(2)]
    clock.advance(3600.0)
    recent = [app.submit("jobs.crunch").id for _ in range(3)]
    client = local_client(app.asgi())
    first = client.get("/api/v1/runs", params={"since": "30m", "limit": 2}).json()
    assert [run["id"] for run in first["runs"]] == recent[::-1][:2] and first["next_cursor"] is not None
    second = client.get("/api/v1/runs", params={"since": "30m", "limit": 2, "cursor": first["next_cursor"]}).json()
    assert [run["id"] for run in second["runs"]] == recent[:1] and second["next_cursor"] is None
    assert len(client.get("/api/v1/runs", params={"since": "2h"}).json()["runs"]) == 5


def test_bad_filters_are_refused_naming_the_field_and_change_nothing(app: App, database_url: str) -> None:
    _declare(app)
    app.submit("jobs.crunch")
    client = local_client(app.asgi())
    before = store_size(database_url)
    for params, field in (
        ({"since": "soon"}, "since"),
        ({"since": "0s"}, "since"),
        ({"stuck": "maybe"}, "stuck"),
        ({"stuck": "true", "status": "queued"}, "status"),
    ):
        refused = client.get("/api/v1/runs", params=params)
        assert refused.status_code == 422 and refused.json()["field"] == field, (params, refused.text)
        assert set(refused.json()) == {"error", "detail", "field"}
    assert store_size(database_url) == before


def test_workers_have_the_fields_the_cli_shows(app: App, database_url: str) -> None:
    _declare(app)
    _start(app, DEAD, LEASE)
    answer = local_client(app.asgi()).get("/api/v1/workers")
    assert answer.status_code == 200, answer.text
    [worker] = answer.json()["workers"]
    assert (worker["host"], worker["pid"], worker["rank"], worker["capacity"], worker["busy"]) == (
        "host-a",
        4242,
        0,
        2,
        1,
    )
    assert worker["queues"] == ["default"] and worker["heartbeat_age"] >= 0
    printed = CliRunner().invoke(cli, ["workers", "list", "--json", "--database", database_url])
    [shown] = json.loads(printed.stdout)["workers"]
    same = ("id", "host", "pid", "rank", "capacity", "busy", "queues", "fill_order", "live")
    assert {key: worker[key] for key in same} == {key: shown[key] for key in same}
