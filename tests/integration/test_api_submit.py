"""Submitting over HTTP: a worker runs what the API stored, and GET shows its result.

Both ways of serving are covered: with the user's App (its code, its
declarations) and bare, knowing tasks only by what workers registered in the
store (as `tidegate serve` without MODULE:APP). A batch is stored whole or
not at all.
"""

from __future__ import annotations

import pytest

from tests.apps.api import local_client, store_size
from tests.conftest import wait_status
from tidegate import App, QueueConfig, RunStatus


def _declare(app: App) -> None:
    @app.task(name="add")
    def add(a: int, b: int = 1) -> int:
        return a + b

    app.store.check_schema()  # the store is open (and migrated) before the first request: its rows can be counted


def test_a_run_submitted_over_http_is_run_and_shown(app: App, start_worker) -> None:
    _declare(app)
    client = local_client(app.asgi())
    response = client.post("/api/v1/runs", json={"task": "add", "args": {"a": 2, "b": 3}, "tags": {"tenant": "acme"}})
    assert response.status_code == 201, response.text
    submitted = response.json()
    assert submitted["status"] == "queued" and submitted["tags"] == {"tenant": "acme"}
    assert submitted["links"]["self"] == f"/api/v1/runs/{submitted['id']}"

    start_worker(max_workers=1)
    wait_status(app, submitted["id"], RunStatus.COMPLETED)

    shown = client.get(submitted["links"]["self"]).json()
    assert (shown["status"], shown["result"], shown["args"]) == ("completed", 5, {"a": 2, "b": 3})
    assert shown["attempt"] == 1 and shown["tags"] == {"tenant": "acme"} and shown["finished_at"] is not None
    events = [event["type"] for event in client.get(submitted["links"]["events"]).json()["events"]]
    assert events[0] == "RunQueued" and events[-1] == "RunCompleted" and "RunStarted" in events


def test_a_bare_server_submits_by_what_workers_registered(app: App, database_url: str, start_worker) -> None:
    _declare(app)
    start_worker(max_workers=1)  # registers the task's defaults in the store
    with App(database_url) as bare:
        client = local_client(bare.asgi())
        response = client.post("/api/v1/runs", json={"task": "add", "args": {"a": 40, "b": 2}})
        assert response.status_code == 201, response.text
        run_id = response.json()["id"]
        wait_status(bare, run_id, RunStatus.COMPLETED)
        assert client.get(f"/api/v1/runs/{run_id}").json()["result"] == 42
        unknown = client.post("/api/v1/runs", json={"task": "subtract", "args": {}})
        assert (unknown.status_code, unknown.json()["field"]) == (422, "task")


def test_a_batch_is_stored_whole_or_not_at_all(app: App, database_url: str) -> None:
    _declare(app)
    client = local_client(app.asgi())
    good = [{"task": "add", "args": {"a": n}} for n in range(3)]
    before = store_size(database_url)
    refused = client.post("/api/v1/runs/batch", json={"runs": [*good, {"task": "add", "args": {"c": 1}}]})
    assert refused.status_code == 422
    assert refused.json()["field"] == "runs.3.args"
    assert store_size(database_url) == before

    accepted = client.post("/api/v1/runs/batch", json={"runs": good})
    assert accepted.status_code == 201, accepted.text
    ids = [run["id"] for run in accepted.json()["runs"]]
    assert len(set(ids)) == 3
    assert {app.store.get_run(run_id).args["a"] for run_id in ids} == {0, 1, 2}
    assert store_size(database_url) == (before[0] + 3, before[1] + 3)


@pytest.mark.parametrize("body", [{"runs": []}, {"runs": "add"}, {}])
def test_an_empty_or_malformed_batch_stores_nothing(app: App, database_url: str, body: dict) -> None:
    _declare(app)
    client = local_client(app.asgi())
    before = store_size(database_url)
    response = client.post("/api/v1/runs/batch", json=body)
    assert (response.status_code, response.json()["field"]) == (422, "runs")
    assert store_size(database_url) == before


def test_the_api_mounts_inside_another_asgi_service(app: App) -> None:
    from fastapi import FastAPI

    _declare(app)
    service = FastAPI()
    service.mount("/tidegate", app.asgi())
    client = local_client(service)
    response = client.post("/tidegate/api/v1/runs", json={"task": "add", "args": {"a": 1}})
    assert response.status_code == 201, response.text
    assert response.json()["links"]["self"].startswith("/tidegate/api/v1/runs/")
    assert client.get(response.json()["links"]["self"]).json()["status"] == "queued"
    assert "/tidegate/api/v1/openapi.json" in client.get("/tidegate/api/docs").text
    assert client.get("/tidegate/api/v1/openapi.json").json()["info"]["title"] == "tidegate"


def test_a_workflow_run_shows_its_steps(app: App, start_worker) -> None:
    from tidegate import Executor, Workflow

    @app.step
    def double(n: int) -> int:
        return 2 * n

    @app.step
    def total(values: list[int]) -> int:
        return sum(values)

    @app.workflow(name="sum_doubles", executor=Executor.in_process())
    def sum_doubles(wf: Workflow, numbers: list[int]) -> object:
        return wf.step(total, wf.map(double, numbers, concurrency=2))

    client = local_client(app.asgi())
    submitted = client.post("/api/v1/runs", json={"task": "sum_doubles", "args": {"numbers": [1, 2, 3]}})
    assert submitted.status_code == 201, submitted.text
    start_worker(max_workers=1)
    wait_status(app, submitted.json()["id"], RunStatus.COMPLETED)

    shown = client.get(submitted.json()["links"]["self"]).json()
    assert shown["result"] == 12
    steps = {step["key"]: step for step in shown["steps"]}
    assert set(steps) == {"double[0]", "double[1]", "double[2]", "total"}
    assert all(step["status"] == "completed" for step in steps.values())
    assert steps["double[2]"]["output"] == 6 and steps["double[2]"]["map_key"] == "double"
    assert steps["total"]["output"] == 12 and steps["total"]["item_index"] is None


def test_cancel_over_http_ends_a_queued_run_now_and_asks_the_worker_of_a_running_one(app: App, start_worker) -> None:
    from tidegate import Context

    @app.task(name="patient")
    def patient(ctx: Context) -> None:
        ctx.wait_cancelled_sync(60)
        ctx.raise_if_cancelled()

    client = local_client(app.asgi())
    running = client.post("/api/v1/runs", json={"task": "patient"}).json()
    start_worker(max_workers=1)
    wait_status(app, running["id"], RunStatus.RUNNING)
    queued = client.post("/api/v1/runs", json={"task": "patient"}).json()  # the worker is full: it waits

    now = client.post(queued["links"]["cancel"]).json()
    assert (now["status"], now["cancel_requested"]) == ("canceled", False)
    asked = client.post(running["links"]["cancel"]).json()
    assert (asked["status"], asked["cancel_requested"]) == ("running", True)
    wait_status(app, running["id"], RunStatus.CANCELED)
    assert client.get(running["links"]["self"]).json()["status"] == "canceled"
    events = [event["type"] for event in client.get(running["links"]["events"]).json()["events"]]
    assert events[-1] == "RunCanceled"


def test_a_bare_server_reads_a_queues_declaration_once_per_batch(
    app: App, database_url: str, start_worker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the user's module a queue's declaration comes from the store (a round trip on
    PostgreSQL): the field check and the runs' partition share one answer per queue and batch."""
    _declare(app)
    start_worker(max_workers=1)  # registers the task's defaults in the store
    with App(database_url) as bare:
        asked: list[str] = []
        read = bare.queue_config

        def counted(name: str) -> QueueConfig:
            asked.append(name)
            return read(name)

        monkeypatch.setattr(bare, "queue_config", counted)
        client = local_client(bare.asgi())
        response = client.post(
            "/api/v1/runs/batch", json={"runs": [{"task": "add", "args": {"a": n}} for n in range(5)]}
        )
        assert response.status_code == 201, response.text
        assert asked == ["default"]
