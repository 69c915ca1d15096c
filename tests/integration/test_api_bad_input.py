"""Every bad input over HTTP: the status, the field named, and the store unchanged.

Each case counts the runs and events stored before and after the request: a
refusal must change nothing, on either backend.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.apps.api import local_client, store_size
from tidegate import App

GOOD: dict[str, Any] = {"task": "add", "args": {"a": 1}}


def _with(**changes: Any) -> dict[str, Any]:
    return {**GOOD, **changes}


def _nested(depth: int) -> Any:
    value: Any = []
    for _ in range(depth):
        value = [value]
    return value


SUBMITS = [
    pytest.param(_with(task="subtract"), 422, "task", id="unknown task"),
    pytest.param(_with(task="not a name!"), 422, "task", id="malformed task name"),
    pytest.param(_with(task=7), 422, "task", id="task not a string"),
    pytest.param({"args": {"a": 1}}, 422, "task", id="task missing"),
    pytest.param(_with(queue="elsewhere"), 422, "queue", id="unknown queue"),
    pytest.param(_with(queue="a/b"), 422, "queue", id="malformed queue name"),
    pytest.param(_with(args={"c": 1}), 422, "args", id="args not the task's parameters"),
    pytest.param(_with(args={}), 422, "args", id="a required arg missing"),
    pytest.param(_with(args=[1, 2]), 422, "args", id="args not an object"),
    pytest.param(_with(args={"a": _nested(100)}), 422, "args", id="args nested too deep"),
    pytest.param(_with(priority="5"), 422, "priority", id="priority as text"),
    pytest.param(_with(priority=1.5), 422, "priority", id="priority fractional"),
    pytest.param(_with(priority=2**40), 422, "priority", id="priority out of range"),
    pytest.param(_with(tags={"tenant": 1}), 422, "tags.tenant", id="tag value not text"),
    pytest.param(_with(tags={"bad key": "x"}), 422, "tags", id="malformed tag key"),
    pytest.param(_with(tags={"k": "two\nlines"}), 422, "tags", id="tag value on two lines"),
    pytest.param(_with(concurrency_key=""), 422, "concurrency_key", id="empty concurrency key"),
    pytest.param(_with(run_at="tomorrow"), 422, "run_at", id="run_at not a time"),
    pytest.param(_with(run_at=1700000000), 422, "run_at", id="run_at a number"),
    pytest.param(_with(run_at="9999-01-01T00:00:00Z"), 422, "run_at", id="run_at beyond 100 years"),
    pytest.param(_with(prio=3), 422, "prio", id="unknown option"),
    pytest.param([GOOD], 422, "body", id="body a list"),
]

RAW_SUBMITS = [
    pytest.param(b'{"task": "add", "args": {"a": NaN}}', 422, "args", id="NaN in args"),
    pytest.param(b'{"task": "add", "args": {"a": "\\ud800"}}', 422, "args", id="lone surrogate in args"),
    pytest.param(b'{"task": "add", "args": {"a": 1}', 422, "body", id="truncated JSON"),
    pytest.param(b"task=add", 422, "body", id="not JSON"),
    pytest.param(b'{"task": "add", "args": {"a": "' + b"x" * (4 * 1024 * 1024 + 70_000) + b'"}}', 413, "body",
                 id="body over the size limit"),
]  # fmt: skip

QUERIES = [
    pytest.param("/api/v1/runs?status=sleeping", 422, "status", id="unknown status"),
    pytest.param("/api/v1/runs?limit=0", 422, "limit", id="limit zero"),
    pytest.param("/api/v1/runs?limit=100000", 422, "limit", id="limit too large"),
    pytest.param("/api/v1/runs?cursor=%21%21", 422, "cursor", id="cursor not ours"),
    pytest.param("/api/v1/runs?tag=novalue", 422, "tag", id="tag filter without ="),
    pytest.param("/api/v1/runs?queue=a%2Fb", 422, "queue", id="malformed queue filter"),
    pytest.param(f"/api/v1/runs/{'x' * 300}", 422, "run_id", id="run id too long"),
    pytest.param("/api/v1/runs/01NOSUCHRUN", 404, None, id="unknown run"),
    pytest.param("/api/v1/runs/01NOSUCHRUN/events", 404, None, id="events of an unknown run"),
]


@pytest.fixture
def client(app: App) -> TestClient:
    @app.task(name="add")
    def add(a: int, b: int = 1) -> int:
        return a + b

    local_client(app.asgi()).post("/api/v1/runs", json=GOOD).raise_for_status()  # the store is open and in use
    return local_client(app.asgi())


def _refused(response: Any, status: int, field: str | None) -> None:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) >= {"error", "detail"} and body["detail"]
    assert body.get("field") == field
    assert "Traceback" not in response.text


@pytest.mark.parametrize(("body", "status", "field"), SUBMITS)
def test_a_bad_submit_names_its_field_and_stores_nothing(client, database_url, body, status, field) -> None:
    before = store_size(database_url)
    _refused(client.post("/api/v1/runs", json=body), status, field)
    batch = client.post("/api/v1/runs/batch", json={"runs": [GOOD, body]})
    _refused(batch, status, "runs.1" if field == "body" else f"runs.1.{field}")
    assert store_size(database_url) == before


@pytest.mark.parametrize(("raw", "status", "field"), RAW_SUBMITS)
def test_a_malformed_body_is_refused_and_stores_nothing(client, database_url, raw, status, field) -> None:
    before = store_size(database_url)
    _refused(client.post("/api/v1/runs", content=raw, headers={"content-type": "application/json"}), status, field)
    assert store_size(database_url) == before


@pytest.mark.parametrize(("path", "status", "field"), QUERIES)
def test_a_bad_read_names_its_field(client, database_url, path, status, field) -> None:
    before = store_size(database_url)
    _refused(client.get(path), status, field)
    assert store_size(database_url) == before


def test_cancelling_an_unknown_run_is_404_and_changes_nothing(client, database_url) -> None:
    before = store_size(database_url)
    _refused(client.post("/api/v1/runs/01NOSUCHRUN/cancel"), 404, None)
    assert store_size(database_url) == before


def test_json_is_the_only_body(client) -> None:
    assert json.loads(client.get("/nowhere").text) == {"error": "not_found", "detail": "Not Found", "field": None}
