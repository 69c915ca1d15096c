"""GET /api/v1/runs: newest first, filtered, paged by an opaque keyset cursor, on both backends."""

from __future__ import annotations

from fastapi.testclient import TestClient

from tests.apps.api import local_client
from tidegate import App


def _ids(client: TestClient, **params: object) -> list[str]:
    """Every page of a listing, following next_cursor; fails on a repeated run."""
    seen: list[str] = []
    cursor = None
    while True:
        query = {**params, **({"cursor": cursor} if cursor else {})}
        page = client.get("/api/v1/runs", params=query).json()
        seen.extend(run["id"] for run in page["runs"])
        cursor = page["next_cursor"]
        if cursor is None:
            assert len(seen) == len(set(seen)), "a run appeared on two pages"
            return seen


def test_pages_are_newest_first_disjoint_and_filtered(app: App) -> None:
    app.queue("other")

    @app.task(name="first")
    def first(n: int) -> int:
        return n

    @app.task(name="second", queue="other")
    def second(n: int) -> int:
        return n

    client = local_client(app.asgi())
    submitted = []
    for n in range(7):
        tags = {"tenant": f"t{n % 3}", "env": "prod"}
        body = {"task": "first" if n % 2 else "second", "args": {"n": n}, "tags": tags}
        submitted.append(client.post("/api/v1/runs", json=body).json()["id"])
    client.post(f"/api/v1/runs/{submitted[0]}/cancel").raise_for_status()

    newest_first = list(reversed(submitted))
    assert _ids(client, limit=3) == newest_first
    assert len(client.get("/api/v1/runs", params={"limit": 3}).json()["runs"]) == 3
    assert _ids(client, limit=2, task="first") == [i for n, i in reversed(list(enumerate(submitted))) if n % 2]
    assert _ids(client, queue="other") == [i for n, i in reversed(list(enumerate(submitted))) if not n % 2]
    assert _ids(client, tag=["tenant=t1", "env=prod"]) == [submitted[4], submitted[1]]
    assert _ids(client, tag=["tenant=t1", "env=dev"]) == []
    assert _ids(client, status="canceled") == [submitted[0]]
    assert _ids(client, status="queued", limit=1) == newest_first[:-1]
    shown = client.get("/api/v1/runs", params={"limit": 1}).json()["runs"][0]
    assert shown["id"] == submitted[-1] and shown["args"] == {"n": 6} and shown["links"]["self"].endswith(shown["id"])
