"""The operator routes over HTTP, on both backends: why a run waits, retry, the queue, the workers.

Runs are put in the states an operator meets (running and holding slots,
queued behind a full scope or full workers) by driving the store's own worker
cycle by hand, so each answer is deterministic; the retry test runs a real
in-thread worker.
"""

from __future__ import annotations

import time
from typing import Any

from fastapi.testclient import TestClient

from tests.apps.api import local_client, store_size
from tidegate import App, Concurrency, Partition, RunStatus
from tidegate.api.application import create_api
from tidegate.api.security import Tokens
from tidegate.domain.model import ClaimedRun, CycleRequest, Outcome, OutcomeKind, WorkerRegistration

from .conftest import wait_status

QUEUES = ["default", "api"]


def _tasks(app: App) -> None:
    app.queue("api", concurrency=Concurrency(global_limit=1, partition=Partition(by_args=["customer_id"])))

    @app.task(name="sync_customer", queue="api")
    def sync_customer(customer_id: int) -> None:
        return None

    @app.task(name="hello")
    def hello() -> None:
        return None


def _submit(client: TestClient, task: str, **body: Any) -> str:
    response = client.post("/api/v1/runs", json={"task": task, **body})
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def _claim(app: App, worker: str = "w1", limit: int = 10) -> list[ClaimedRun]:
    return app.store.cycle(CycleRequest(worker, QUEUES, [], [], limit, 60)).claimed


def _finish(app: App, worker: str, claimed: ClaimedRun) -> None:
    """Its start and its end, as a worker reports a run that ran (the ETA goes by how long runs took)."""
    fence = (claimed.id, claimed.attempt)
    app.store.cycle(
        CycleRequest(worker, QUEUES, [fence], [Outcome(claimed.id, claimed.attempt, OutcomeKind.COMPLETED)], 0, 60)
    )


def _why(client: TestClient, run_id: str) -> dict[str, Any]:
    response = client.get(f"/api/v1/runs/{run_id}/why")
    assert response.status_code == 200, response.text
    return dict(response.json())


def _blocking(why: dict[str, Any]) -> list[tuple[str, str, int, int, list[str]]]:
    return [
        (layer["layer"], layer["scope"], layer["used"], layer["limit"], [h["run_id"] for h in layer["holders"]])
        for layer in why["layers"]
        if not layer["ok"]
    ]


def test_why_names_a_full_partition_and_its_holder_and_an_eta_once_runs_end(app: App) -> None:
    _tasks(app)
    client = local_client(app.asgi())
    first, second, third = (_submit(client, "sync_customer", args={"customer_id": 3}) for _ in range(3))
    other = _submit(client, "sync_customer", args={"customer_id": 4})
    assert {run.id for run in _claim(app)} == {first, other}

    why = _why(client, third)
    assert (why["status"], why["position"], why["queued_in_queue"]) == ("queued", 2, 2)
    assert _blocking(why) == [("queue", "queue:api/customer_id=3", 1, 1, [first])]
    assert why["blocked_by"] == ["queue:api/customer_id=3"]
    assert why["eta_seconds"] is None  # nothing of the partition has run yet: no duration to go by

    _finish(app, "w1", _held(app, first))
    assert [run.id for run in _claim(app)] == [second]
    why = _why(client, third)
    assert _blocking(why) == [("queue", "queue:api/customer_id=3", 1, 1, [second])]
    assert why["eta_seconds"] is not None and why["eta_seconds"] > 0
    assert _why(client, other)["layers"] == []  # running, and not a workflow waiting for pools


def _held(app: App, run_id: str) -> ClaimedRun:
    run = app.store.get_run(run_id)
    assert run is not None and run.status is RunStatus.RUNNING
    return ClaimedRun(run.id, run.task, run.queue, run.args, run.attempt, run.max_attempts, 1.0, None)


def test_why_names_a_full_tag_and_its_holder(app: App) -> None:
    _tasks(app)
    client = local_client(app.asgi())
    first = _submit(client, "hello", tags={"tenant": "acme"})
    waiting = _submit(client, "hello", tags={"tenant": "acme"})
    free = _submit(client, "hello", tags={"tenant": "globex"})
    app.store.set_limit("tag:tenant", 1)  # one run per tenant
    assert {run.id for run in _claim(app)} == {first, free}
    why = _why(client, waiting)
    assert _blocking(why) == [("tag", "tag:tenant=acme", 1, 1, [first])]
    assert why["eta_seconds"] is None


def test_why_names_the_global_cap_and_its_holders(app: App) -> None:
    _tasks(app)
    client = local_client(app.asgi())
    running = [_submit(client, "hello"), _submit(client, "sync_customer", args={"customer_id": 1})]
    waiting = _submit(client, "hello")
    app.store.set_limit("global", 2)
    assert {run.id for run in _claim(app)} == set(running)
    why = _why(client, waiting)
    [(layer, scope, used, limit, holders)] = _blocking(why)
    assert (layer, scope, used, limit, sorted(holders)) == ("global", "global", 2, 2, sorted(running))
    assert [layer["label"] for layer in why["layers"]] == ["max_concurrent_runs"]


def test_why_names_full_workers_and_the_runs_they_run(app: App) -> None:
    _tasks(app)
    client = local_client(app.asgi())
    running, waiting = _submit(client, "hello"), _submit(client, "hello")
    app.store.register_worker(WorkerRegistration("w-full", 1, ["default"], False, 60))
    assert _why(client, running)["layers"] == [
        {
            "layer": "workers", "scope": "workers:default", "label": "workers serving queue default",
            "used": 0, "limit": 1, "slots": 1, "ok": True, "per": None, "next_allowed_in": None, "holders": [],
        }
    ]  # fmt: skip
    assert [run.id for run in _claim(app, "w-full", limit=1)] == [running]
    why = _why(client, waiting)
    assert _blocking(why) == [("workers", "workers:default", 1, 1, [running])]
    assert why["layers"][0]["holders"][0]["worker_id"] == "w-full"
    assert why["eta_seconds"] is None


def test_why_of_unknown_and_finished_runs(app: App) -> None:
    _tasks(app)
    client = local_client(app.asgi())
    assert client.get("/api/v1/runs/01NOPE/why").status_code == 404
    run_id = _submit(client, "hello")
    client.post(f"/api/v1/runs/{run_id}/cancel").raise_for_status()
    why = _why(client, run_id)
    assert (why["status"], why["position"], why["layers"], why["eta_seconds"]) == ("canceled", None, [], None)


def test_retry_gives_a_failed_run_a_new_attempt_that_runs(app: App, start_worker: Any) -> None:
    calls: list[int] = []

    @app.task(name="flaky")
    def flaky() -> str:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("first call fails")
        return "ok"

    client = local_client(app.asgi())
    run_id = _submit(client, "flaky")
    start_worker()
    wait_status(app, run_id, RunStatus.FAILED)

    response = client.post(f"/api/v1/runs/{run_id}/retry")
    assert response.status_code == 200, response.text
    assert response.json() == {"id": run_id, "status": "queued", "attempt": 1, "max_attempts": 2}
    wait_status(app, run_id, RunStatus.COMPLETED)
    assert app.store.get_run(run_id).result == "ok"  # type: ignore[union-attr]
    assert "RunRetriedManually" in [event.type for event in app.store.run_events(run_id)]

    refused = client.post(f"/api/v1/runs/{run_id}/retry")  # completed: nothing to retry
    assert (refused.status_code, refused.json()["error"]) == (409, "run_not_retryable")
    assert client.post("/api/v1/runs/01NOPE/retry").status_code == 404


def test_retry_past_the_admission_ceiling_gets_429_with_retry_after_and_changes_nothing(
    app: App, database_url: str
) -> None:
    app.queue("capped", max_active=1)

    @app.task(name="capped", queue="capped")
    def capped() -> None:
        return None

    client = local_client(app.asgi())
    canceled = _submit(client, "capped")
    assert client.post(f"/api/v1/runs/{canceled}/cancel").status_code == 200
    holder = _submit(client, "capped")  # the one active place
    before = store_size(database_url)
    refused = client.post(f"/api/v1/runs/{canceled}/retry")
    assert refused.status_code == 429, refused.text
    hint = int(refused.headers["Retry-After"])
    assert hint >= 1 and refused.json()["retry_after"] == hint and refused.json()["error"] == "admission_rejected"
    assert store_size(database_url) == before and app.store.get_run(canceled).status is RunStatus.CANCELED
    assert client.post(f"/api/v1/runs/{holder}/cancel").status_code == 200
    assert client.post(f"/api/v1/runs/{canceled}/retry").json()["status"] == "queued"


def test_retry_needs_the_full_token(app: App) -> None:
    _tasks(app)
    run_id = local_client(app.asgi()).post("/api/v1/runs", json={"task": "hello"}).json()["id"]
    app.store.cancel_run(run_id)
    client = local_client(create_api(app, tokens=Tokens(full="full-token", read="read-token")))
    read = {"Authorization": "Bearer read-token"}
    assert client.post(f"/api/v1/runs/{run_id}/retry", headers=read).status_code == 403
    assert client.get(f"/api/v1/runs/{run_id}/why", headers=read).status_code == 200
    assert client.get("/api/v1/queue", headers=read).status_code == 200
    assert client.get("/api/v1/workers", headers=read).status_code == 200
    assert app.store.get_run(run_id).status is RunStatus.CANCELED  # type: ignore[union-attr]
    full = {"Authorization": "Bearer full-token"}
    assert client.post(f"/api/v1/runs/{run_id}/retry", headers=full).json()["status"] == "queued"


def test_queue_lists_queued_runs_in_claim_order_with_positions_and_reasons(app: App) -> None:
    _tasks(app)
    client = local_client(app.asgi())
    held = _submit(client, "sync_customer", args={"customer_id": 3})
    blocked = _submit(client, "sync_customer", args={"customer_id": 3})
    low = _submit(client, "hello")
    high = _submit(client, "hello", priority=5)
    app.store.cycle(CycleRequest("w1", ["default"], [], [], 1, 60))  # takes `high` (priority first)
    assert app.store.get_run(high).status is RunStatus.RUNNING  # type: ignore[union-attr]
    app.store.cycle(CycleRequest("w1", ["api"], [], [], 10, 60))  # `held` runs, `blocked` records its reason
    assert app.store.get_run(held).status is RunStatus.RUNNING  # type: ignore[union-attr]

    page = client.get("/api/v1/queue").json()
    assert page["total"] == 2
    listed = [(run["position"], run["id"], run["queue"]) for run in page["runs"]]
    assert listed == [(1, blocked, "api"), (2, low, "default")]  # priority, then age: one rank across queues
    reasons = {run["id"]: run["block_reason"] for run in page["runs"]}
    assert reasons[blocked][0]["scope"] == "queue:api/customer_id=3" and reasons[low] is None

    only_api = client.get("/api/v1/queue", params={"queue": "api"}).json()
    assert [run["id"] for run in only_api["runs"]] == [blocked] and only_api["total"] == 1
    assert len(client.get("/api/v1/queue", params={"limit": 1}).json()["runs"]) == 1
    bad = client.get("/api/v1/queue", params={"queue": "bad name\n"})
    assert (bad.status_code, bad.json()["field"]) == (422, "queue")


def test_workers_lists_the_registry_with_busy_and_heartbeat_age(app: App) -> None:
    _tasks(app)
    client = local_client(app.asgi())
    run_id = _submit(client, "hello")
    registered = time.monotonic()
    app.store.register_worker(WorkerRegistration("w-a", 2, ["default", "api"], True, 60))
    _claim(app, "w-a")
    [worker] = client.get("/api/v1/workers").json()["workers"]
    assert {k: worker[k] for k in ("id", "rank", "capacity", "busy", "queues", "fill_order", "live")} == {
        "id": "w-a", "rank": 0, "capacity": 2, "busy": 1, "queues": ["api", "default"], "fill_order": True,
        "live": True,
    }  # fmt: skip
    assert 0 <= worker["heartbeat_age"] <= time.monotonic() - registered + 0.5  # however slow the machine
    assert app.store.get_run(run_id).worker_id == "w-a"  # type: ignore[union-attr]
