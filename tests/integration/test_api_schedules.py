"""`/api/v1/schedules`: list, pause, resume, delete, as `tidegate schedules` does, on both backends.

The list is the store's (`Store.list_schedules`, as the CLI prints it); a
pause keeps the schedule from firing and survives the worker re-declaring it;
a resume fires from the first tick after the app's now; a delete leaves the
fired runs. Unknown names are 404, malformed ones 422, a read token 403, and
none of them changes the store.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from typer.testing import CliRunner

from tests.apps.api import local_client
from tidegate import App
from tidegate.api import Tokens, create_api
from tidegate.cli.main import app as cli
from tidegate.domain.clock import wall_now

TIMES = ("next_fire_at", "last_fire_at")


def _declare(app: App) -> None:
    @app.task(name="reports.nightly")
    def nightly(region: str) -> str:
        return region

    app.schedule(nightly, cron="30 2 * * *", timezone="Europe/Paris", args={"region": "eu"}, name="nightly-eu")
    app.schedule(nightly, cron="*/5 * * * *", args={"region": "us"}, name="every-five-us", missed="catch_up")
    app.worker()  # stores the declarations


def _instants(listed: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {**item, **{key: None if item[key] is None else datetime.fromisoformat(item[key]) for key in TIMES}}
        for item in listed
    ]


def _state(app: App) -> list[tuple[str, bool, datetime]]:
    return [(record.name, record.paused, record.next_fire_at) for record in app.store.list_schedules()]


def test_schedules_are_listed_as_the_cli_lists_them(app: App, database_url: str) -> None:
    _declare(app)
    answer = local_client(app.asgi()).get("/api/v1/schedules")
    assert answer.status_code == 200, answer.text
    listed = answer.json()["schedules"]
    assert [item["name"] for item in listed] == ["every-five-us", "nightly-eu"]
    assert (listed[1]["cron"], listed[1]["timezone"], listed[1]["args"]) == (
        "30 2 * * *",
        "Europe/Paris",
        {"region": "eu"},
    )
    assert listed[0]["missed"] == "catch_up" and listed[0]["paused"] is False
    printed = CliRunner().invoke(cli, ["schedules", "list", "--json", "--database", database_url])
    assert printed.exit_code == 0, printed.output
    assert _instants(listed) == _instants(json.loads(printed.stdout)["schedules"])


def test_pause_resume_and_delete(app: App, clock) -> None:
    _declare(app)
    client = local_client(app.asgi())
    paused = client.post("/api/v1/schedules/nightly-eu/pause")
    assert paused.status_code == 200, paused.text
    body = paused.json()
    assert (body["name"], body["paused"], body["next_fire_at"], body["changed"]) == ("nightly-eu", True, None, True)
    assert client.post("/api/v1/schedules/nightly-eu/pause").json()["changed"] is False
    assert {name: paused for name, paused, _ in _state(app)} == {"every-five-us": False, "nightly-eu": True}
    app.worker()  # the code declares it again: the pause holds
    assert {name: paused for name, paused, _ in _state(app)}["nightly-eu"] is True

    clock.advance(3 * 86400.0)  # three nights paused: a resume does not make their ticks up
    resumed = client.post("/api/v1/schedules/nightly-eu/resume").json()
    assert resumed["paused"] is False and resumed["changed"] is True
    assert datetime.fromisoformat(resumed["next_fire_at"]) > wall_now(app.clock)

    removed = client.delete("/api/v1/schedules/every-five-us")
    assert removed.status_code == 200 and removed.json() == {"name": "every-five-us", "removed": True}
    assert [name for name, _, _ in _state(app)] == ["nightly-eu"]
    again = client.delete("/api/v1/schedules/every-five-us")
    assert again.status_code == 404 and again.json()["error"] == "schedule_not_found", again.text


def test_unknown_or_malformed_names_are_refused_and_change_nothing(app: App) -> None:
    _declare(app)
    client = local_client(app.asgi())
    before = _state(app)
    for method, path in (("post", "/pause"), ("post", "/resume"), ("delete", "")):
        missing = getattr(client, method)(f"/api/v1/schedules/nowhere{path}")
        assert missing.status_code == 404, missing.text
        assert missing.json() == {"error": "schedule_not_found", "detail": missing.json()["detail"], "field": None}
        malformed = getattr(client, method)(f"/api/v1/schedules/bad%20name{path}")
        assert malformed.status_code == 422 and malformed.json()["field"] == "name", malformed.text
    assert _state(app) == before


def test_the_read_token_lists_schedules_but_may_not_change_them(app: App) -> None:
    _declare(app)
    client = local_client(create_api(app, tokens=Tokens(full="full-token", read="read-token")))
    read = {"Authorization": "Bearer read-token"}
    assert client.get("/api/v1/schedules", headers=read).status_code == 200
    before = _state(app)
    for method, path in (("post", "/pause"), ("post", "/resume"), ("delete", "")):
        refused = getattr(client, method)(f"/api/v1/schedules/nightly-eu{path}", headers=read)
        assert refused.status_code == 403 and refused.json()["error"] == "forbidden", refused.text
    assert _state(app) == before
    full = client.post("/api/v1/schedules/nightly-eu/pause", headers={"Authorization": "Bearer full-token"})
    assert full.status_code == 200 and {name: paused for name, paused, _ in _state(app)}["nightly-eu"] is True
