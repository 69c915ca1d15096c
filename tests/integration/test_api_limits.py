"""`GET/PUT/DELETE /api/v1/limits`: the limits in force, live changes with a dry run, resets.

A dry run counts the queued runs the change would let start or hold back
(the engine's preview, as `tidegate limits set --dry-run`) and changes
nothing; a change and a reset are versioned and audited (LimitChanged) as
from the CLI; a bad target or limit names its field and changes nothing.
"""

from __future__ import annotations

from tests.apps.api import local_client, store_size
from tidegate import App, Concurrency, RunStatus
from tidegate.api import Tokens, create_api
from tidegate.domain.model import CycleRequest

WORKER = "w-test"


def _scene(app: App):
    """Queue `api` (limit 1): one run running, two queued behind it."""
    app.queue("api", concurrency=Concurrency(global_limit=1))

    @app.task(name="call", queue="api")
    def call() -> None:
        return None

    ids = [app.submit("call").id for _ in range(3)]
    app.store.cycle(CycleRequest(WORKER, ["api"], [], [], 3, 60))
    assert [app.store.get_run(run_id).status for run_id in ids].count(RunStatus.RUNNING) == 1
    return local_client(app.asgi())


def _limit(client, target: str) -> dict:
    return next(row for row in client.get("/api/v1/limits").json()["limits"] if row["target"] == target)


def test_a_dry_run_counts_what_a_change_would_unblock_and_changes_nothing(app: App, database_url: str) -> None:
    client = _scene(app)
    before = store_size(database_url)
    preview = client.put("/api/v1/limits", json={"target": "queue:api", "limit": 3, "dry_run": True})
    assert preview.status_code == 200, preview.text
    body = preview.json()
    assert (body["old"], body["new"], body["unblocked"], body["blocked"], body["considered"]) == (1, 3, 2, 0, 2)
    assert body["dry_run"] is True and body["version"] is None
    assert store_size(database_url) == before and app.store.limit_overrides() == []


def test_a_change_is_in_force_versioned_audited_and_reset_to_the_code(app: App, database_url: str) -> None:
    client = _scene(app)
    assert _limit(client, "queue:api") == {
        "target": "queue:api", "limit": 1, "code_limit": 1, "used": 1, "live": False,
        "version": None, "parent": None, "declared": "code", "note": "", "adaptive": "", "per": None, "burst": None,
    }  # fmt: skip
    _, events = store_size(database_url)
    changed = client.put("/api/v1/limits", json={"target": "queue:api", "limit": 3})
    assert changed.status_code == 200, changed.text
    assert {key: changed.json()[key] for key in ("old", "new", "version", "dry_run")} == {
        "old": 1, "new": 3, "version": 1, "dry_run": False,
    }  # fmt: skip
    assert _limit(client, "queue:api") == {
        "target": "queue:api", "limit": 3, "code_limit": 1, "used": 1, "live": True,
        "version": 1, "parent": None, "declared": "code", "note": "", "adaptive": "", "per": None, "burst": None,
    }  # fmt: skip
    [override] = client.get("/api/v1/limits").json()["overrides"]
    assert (override["target"], override["limit"], override["version"]) == ("queue:api", 3, 1)
    assert app.store.rules().queue_limit("api", "") == 3

    reset = client.delete("/api/v1/limits", params={"target": "queue:api"})
    assert reset.status_code == 200, reset.text
    [done] = reset.json()["reset"]
    assert (done["target"], done["old"], done["new"]) == ("queue:api", 3, 1)
    assert client.delete("/api/v1/limits", params={"target": "queue:api"}).json() == {"reset": []}
    assert store_size(database_url)[1] == events + 2  # one LimitChanged each, none for the no-op
    assert app.store.limit_overrides() == []


def test_a_delete_without_a_target_resets_every_override(app: App) -> None:
    client = _scene(app)
    client.put("/api/v1/limits", json={"target": "queue:api", "limit": 2})
    client.put("/api/v1/limits", json={"target": "global", "limit": None})
    reset = client.delete("/api/v1/limits")
    assert sorted(done["target"] for done in reset.json()["reset"]) == ["global", "queue:api"]
    assert app.store.limit_overrides() == []


def test_a_bad_target_or_limit_names_its_field_and_changes_nothing(app: App, database_url: str) -> None:
    client = _scene(app)
    before = store_size(database_url)
    for body, field in (
        ({"target": "queue:nowhere", "limit": 2}, "target"),
        ({"target": "pool:x", "limit": 2}, "target"),
        ({"target": "queue:api", "limit": 0}, "limit"),
        ({"target": "queue:api", "limit": 0, "dry_run": True}, "limit"),
        ({"target": "queue:api"}, "limit"),
        ({"target": "queue:api", "limit": "3"}, "limit"),
    ):
        refused = client.put("/api/v1/limits", json=body)
        assert refused.status_code == 422, (body, refused.text)
        assert refused.json()["field"] == field, (body, refused.json())
    refused = client.delete("/api/v1/limits", params={"target": "bogus"})
    assert refused.status_code == 422 and refused.json()["field"] == "target"
    assert store_size(database_url) == before and app.store.limit_overrides() == []


def test_the_read_token_reads_limits_but_may_not_change_them(app: App) -> None:
    _scene(app)
    client = local_client(create_api(app, tokens=Tokens(full="full-token", read="read-token")))
    read = {"Authorization": "Bearer read-token"}
    assert client.get("/api/v1/limits", headers=read).status_code == 200
    assert client.put("/api/v1/limits", json={"target": "global", "limit": 5}, headers=read).status_code == 403
    assert client.delete("/api/v1/limits", headers=read).status_code == 403
    assert app.store.limit_overrides() == []
