"""Once per key over HTTP: `unique_key`, `idempotency_key` and `idempotency_ttl` in the submit body.

A submit that meets a run holding its key is answered `200` with that run and `duplicate: true`,
a new run `201`; a burst of the same key on one event loop (stored by group commit) stores one
run; `on_conflict="raise"` is a 409 naming the holder; a bad key is a 422 naming its field.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from tests.apps.api import local_client
from tidegate import App, Unique


def _declare(app: App) -> None:
    @app.task(name="u.http", unique=Unique(by_args=["customer_id"]))
    def refresh(customer_id: int, note: str = "") -> None:
        return None

    @app.task(name="u.plain")
    def plain(x: int) -> None:
        return None

    @app.task(name="u.strict", unique=Unique(on_conflict="raise"))
    def strict(x: int) -> None:
        return None

    app.store.check_schema()


def test_a_duplicate_is_answered_200_with_the_existing_run(app: App) -> None:
    _declare(app)
    client = local_client(app.asgi())
    first = client.post("/api/v1/runs", json={"task": "u.http", "args": {"customer_id": 3, "note": "a"}})
    again = client.post("/api/v1/runs", json={"task": "u.http", "args": {"customer_id": 3, "note": "b"}})
    assert (first.status_code, again.status_code) == (201, 200), again.text
    assert first.json()["duplicate"] is False
    assert again.json()["id"] == first.json()["id"] and again.json()["duplicate"] is True
    assert again.json()["status"] == "queued" and again.json()["links"]["self"].endswith(first.json()["id"])
    assert len(app.store.page_runs()) == 1


def test_unique_and_idempotency_keys_in_the_body(app: App) -> None:
    _declare(app)
    client = local_client(app.asgi())
    body: dict[str, Any] = {"task": "u.plain", "args": {"x": 1}}
    keyed = client.post("/api/v1/runs", json={**body, "unique_key": "k"})
    same = client.post("/api/v1/runs", json={"task": "u.plain", "args": {"x": 2}, "unique_key": "k"})
    assert (keyed.status_code, same.status_code) == (201, 200) and same.json()["id"] == keyed.json()["id"]
    idem = {**body, "idempotency_key": "order-7", "idempotency_ttl": "24h"}
    made, repeated = client.post("/api/v1/runs", json=idem), client.post("/api/v1/runs", json=idem)
    assert (made.status_code, repeated.status_code) == (201, 200)
    assert repeated.json()["id"] == made.json()["id"] and repeated.json()["duplicate"] is True
    assert client.post("/api/v1/runs", json=body).status_code == 201  # no key: a new run each time
    assert len(app.store.page_runs()) == 3


def test_a_batch_answers_each_item_by_its_run_or_its_key_holder(app: App) -> None:
    _declare(app)
    client = local_client(app.asgi())
    held = client.post("/api/v1/runs", json={"task": "u.http", "args": {"customer_id": 1}}).json()
    items = [
        {"task": "u.http", "args": {"customer_id": 1}},
        {"task": "u.http", "args": {"customer_id": 2}},
        {"task": "u.http", "args": {"customer_id": 2}},
    ]
    response = client.post("/api/v1/runs/batch", json={"runs": items})
    assert response.status_code == 201, response.text
    runs = response.json()["runs"]
    assert [run["duplicate"] for run in runs] == [True, False, True]
    assert runs[0]["id"] == held["id"] and runs[2]["id"] == runs[1]["id"]
    assert len(app.store.page_runs()) == 2


def test_a_burst_of_one_key_stores_one_run(app: App) -> None:
    _declare(app)
    api = app.asgi()

    async def burst() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=api)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            body = {"task": "u.http", "args": {"customer_id": 9}}
            return await asyncio.gather(*(client.post("/api/v1/runs", json=body) for _ in range(12)))

    responses = asyncio.run(burst())
    assert sorted(response.status_code for response in responses) == [200] * 11 + [201]
    assert len({response.json()["id"] for response in responses}) == 1
    assert len(app.store.page_runs()) == 1


def test_raise_is_a_409_naming_the_holder_and_bad_keys_a_422(app: App) -> None:
    _declare(app)
    client = local_client(app.asgi())
    first = client.post("/api/v1/runs", json={"task": "u.strict", "args": {"x": 1}}).json()
    refused = client.post("/api/v1/runs", json={"task": "u.strict", "args": {"x": 1}})
    assert refused.status_code == 409 and refused.json()["error"] == "duplicate_run"
    assert first["id"] in refused.json()["detail"]
    for extra, field in (
        ({"unique_key": ""}, "unique_key"),
        ({"idempotency_key": "x" * 600}, "idempotency_key"),
        ({"idempotency_key": "k", "idempotency_ttl": "90d"}, "idempotency_ttl"),
        ({"idempotency_ttl": "1h"}, "idempotency_ttl"),
        ({"unique_key": 5}, "unique_key"),
    ):
        response = client.post("/api/v1/runs", json={"task": "u.plain", "args": {"x": 1}, **extra})
        assert response.status_code == 422, (extra, response.text)
        assert response.json()["field"] == field, (extra, response.json())
    assert len(app.store.page_runs()) == 1
