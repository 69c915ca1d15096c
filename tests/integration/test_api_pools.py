"""`GET /api/v1/pools`, `GET /api/v1/pools/{name}` (with its holders) and `PUT /api/v1/pools/{name}`.

Usage and holders are the store's holder rows; a change goes through the
same validation as `tidegate pools set`, names the field at fault, and a
refused one changes nothing.
"""

from __future__ import annotations

from tests.apps.api import local_client, store_size
from tidegate import App
from tidegate.api import Tokens, create_api
from tidegate.domain.model import CycleRequest
from tidegate.domain.steps import SlotRequest


def _client(app: App):
    app.store.check_schema()
    return local_client(app.asgi())


def test_a_pool_is_set_listed_and_shown_with_the_holders_of_its_slots(app: App) -> None:
    client = _client(app)
    created = client.put("/api/v1/pools/database", json={"limit": 3, "lease_duration": "30s"})
    assert created.status_code == 200, created.text
    assert created.json() == {
        "name": "database", "limit": 3, "lease_seconds": 30.0, "lease_duration": "30s", "claimed": 0, "pending": 0,
        "source": "override", "code_limit": None,
    }  # fmt: skip

    @app.task(name="uses_pool")
    def uses_pool() -> None:
        return None

    run_id = app.submit("uses_pool").id
    [claimed] = app.store.cycle(CycleRequest("w-test", ["default"], [], [], 1, 60)).claimed
    grant = app.store.acquire_slots((run_id, claimed.attempt), "w-test", SlotRequest("load", {"pool:database": 2}, {}))
    assert grant.granted

    listed = client.get("/api/v1/pools").json()["pools"]
    assert [(pool["name"], pool["claimed"], pool["limit"]) for pool in listed] == [("database", 2, 3)]
    shown = client.get("/api/v1/pools/database")
    assert shown.status_code == 200, shown.text
    [holder] = shown.json()["holders"]
    assert (holder["run_id"], holder["step_key"], holder["slots"], holder["attempt"]) == (run_id, "load", 2, 1)
    assert holder["worker_id"] == "w-test" and holder["lease_expires_at"] > holder["claimed_at"]

    lowered = client.put("/api/v1/pools/database", json={"limit": 1})  # no lease given: the pool keeps its own
    assert lowered.status_code == 200
    assert (lowered.json()["limit"], lowered.json()["lease_seconds"], lowered.json()["claimed"]) == (1, 30.0, 2)


def test_an_unknown_pool_is_404_and_a_bad_value_names_its_field(app: App, database_url: str) -> None:
    client = _client(app)
    client.put("/api/v1/pools/database", json={"limit": 2, "lease_duration": "1m"})
    missing = client.get("/api/v1/pools/nowhere")
    assert missing.status_code == 404 and missing.json()["error"] == "pool_not_found"
    before = (store_size(database_url), app.store.pools())
    for body, field in (
        ({"limit": -1}, "limit"),
        ({"limit": 2, "lease_duration": "soon"}, "lease_duration"),
        ({"limit": 2, "lease_duration": "10ms"}, "lease_duration"),
        ({"limit": "2"}, "limit"),
        ({"limit": 2, "extra": 1}, "extra"),
    ):
        refused = client.put("/api/v1/pools/database", json=body)
        assert refused.status_code == 422, (body, refused.text)
        assert refused.json()["field"] == field, (body, refused.json())
    bad_name = client.put("/api/v1/pools/bad%20name", json={"limit": 1})
    assert bad_name.status_code == 422 and bad_name.json()["field"] == "name"
    assert (store_size(database_url), app.store.pools()) == before


def test_the_read_token_reads_pools_but_may_not_change_them(app: App) -> None:
    app.store.check_schema()
    client = local_client(create_api(app, tokens=Tokens(full="full-token", read="read-token")))
    read = {"Authorization": "Bearer read-token"}
    assert client.get("/api/v1/pools", headers=read).status_code == 200
    refused = client.put("/api/v1/pools/database", json={"limit": 1}, headers=read)
    assert refused.status_code == 403 and app.store.pools() == []


def test_a_live_pool_limit_set_over_http_wins_over_the_code_until_reset(app: App) -> None:
    """Issue 15 item 2: PUT is an override the code's declaration does not undo; DELETE .../override resets it."""
    client = _client(app)
    app.set_pool_limit("database", 2)
    assert client.put("/api/v1/pools/database", json={"limit": 3}).json()["source"] == "override"
    app.set_pool_limit("database", 2)  # the code runs again
    shown = client.get("/api/v1/pools/database").json()
    assert (shown["limit"], shown["source"], shown["code_limit"]) == (3, "override", 2)
    reset = client.delete("/api/v1/pools/database/override")
    assert reset.status_code == 200, reset.text
    assert (reset.json()["limit"], reset.json()["source"]) == (2, "code")
    assert client.delete("/api/v1/pools/nope/override").status_code == 404
