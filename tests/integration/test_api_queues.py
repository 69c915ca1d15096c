"""`GET /api/v1/queues` and `POST /api/v1/queues/{name}/pause|resume`, with real workers.

A paused queue's runs stay queued while the same workers run other queues'
runs; submits to it are still stored; a resume lets them run. The pause is
in the store, so a new App (another process, a restart) sees it and its
workers hold off too. `queue why` and `GET /queues` say so.
"""

from __future__ import annotations

import time

from tests.apps.api import local_client, store_size
from tests.conftest import wait_status
from tidegate import App, Concurrency, RunStatus
from tidegate.api import Tokens, create_api
from tidegate.domain.model import CycleRequest
from tidegate.engine.operators.why import explain

HELD, OPEN = "held", "open"


def _declare(app: App) -> None:
    app.queue(HELD, concurrency=Concurrency(global_limit=4), max_active=100)

    @app.task(name="held_task", queue=HELD)
    def held_task() -> str:
        return "held"

    @app.task(name="open_task", queue=OPEN)
    def open_task() -> str:
        return "open"


def _queue(client, name: str) -> dict:
    listed = client.get("/api/v1/queues")
    assert listed.status_code == 200, listed.text
    return next(queue for queue in listed.json()["queues"] if queue["name"] == name)


def test_a_paused_queue_keeps_its_runs_queued_while_workers_run_others_until_resumed(app: App, start_worker) -> None:
    _declare(app)
    first = app.submit("held_task").id  # declarations are stored on first use
    client = local_client(app.asgi())
    paused = client.post(f"/api/v1/queues/{HELD}/pause")
    assert paused.status_code == 200, paused.text
    assert paused.json()["paused"] is True and paused.json()["queued"] == 1

    held = [first] + [client.post("/api/v1/runs", json={"task": "held_task"}).json()["id"] for _ in range(2)]
    opened = [app.submit("open_task").id for _ in range(3)]
    start_worker(queues=[HELD, OPEN], max_workers=2)
    for run_id in opened:
        wait_status(app, run_id, RunStatus.COMPLETED)
    time.sleep(0.3)  # the worker keeps cycling: still nothing of the paused queue starts
    assert {app.store.get_run(run_id).status for run_id in held} == {RunStatus.QUEUED}

    shown = _queue(client, HELD)
    assert (shown["paused"], shown["queued"], shown["running"], shown["blocked"]) == (True, 3, 0, 3)
    assert shown["limits"]["global_limit"] == 4 and shown["limits"]["max_active"] == 100
    assert _queue(client, OPEN)["paused"] is False
    assert explain(app.store, held[0]).paused

    resumed = client.post(f"/api/v1/queues/{HELD}/resume")
    assert resumed.status_code == 200 and resumed.json()["paused"] is False
    for run_id in held:
        wait_status(app, run_id, RunStatus.COMPLETED)
    assert not explain(app.store, held[0]).paused


def test_a_pause_holds_for_a_new_app_and_its_workers(app: App, database_url: str, clock, start_worker) -> None:
    _declare(app)
    app.submit("open_task")
    assert local_client(app.asgi()).post(f"/api/v1/queues/{HELD}/pause").status_code == 200
    app.close()

    again = App(database_url, clock=clock)
    worker = None
    try:
        _declare(again)
        held = again.submit("held_task").id
        opened = again.submit("open_task").id
        assert _queue(local_client(again.asgi()), HELD)["paused"] is True
        worker = start_worker(again, queues=[HELD, OPEN], max_workers=2)
        wait_status(again, opened, RunStatus.COMPLETED)
        time.sleep(0.3)
        assert again.store.get_run(held).status is RunStatus.QUEUED
        assert local_client(again.asgi()).post(f"/api/v1/queues/{HELD}/resume").status_code == 200
        wait_status(again, held, RunStatus.COMPLETED)
    finally:
        if worker is not None:  # its store closes with `again`: stop it first
            worker.stop(timeout=30, grace=0)
            assert worker.join(30), "the worker did not stop"
        again.close()


def test_an_unknown_or_malformed_queue_is_refused_and_changes_nothing(app: App, database_url: str) -> None:
    _declare(app)
    app.submit("held_task")
    client = local_client(app.asgi())
    before = store_size(database_url)
    missing = client.post("/api/v1/queues/nowhere/pause")
    assert missing.status_code == 404 and missing.json()["error"] == "queue_not_found"
    malformed = client.post("/api/v1/queues/bad%20name/pause")
    assert malformed.status_code == 422 and malformed.json()["field"] == "name"
    assert store_size(database_url) == before and app.store.rules().paused == frozenset()


def test_the_read_token_lists_queues_but_may_not_pause_them(app: App, database_url: str) -> None:
    _declare(app)
    app.submit("held_task")
    client = local_client(create_api(app, tokens=Tokens(full="full-token", read="read-token")))
    read = {"Authorization": "Bearer read-token"}
    assert client.get("/api/v1/queues", headers=read).status_code == 200
    before = store_size(database_url)
    for action in ("pause", "resume"):
        refused = client.post(f"/api/v1/queues/{HELD}/{action}", headers=read)
        assert refused.status_code == 403 and refused.json()["error"] == "forbidden"
    assert store_size(database_url) == before and app.store.rules().paused == frozenset()
    full = client.post(f"/api/v1/queues/{HELD}/pause", headers={"Authorization": "Bearer full-token"})
    assert full.status_code == 200 and app.store.rules().paused == {HELD}


def test_a_queue_the_served_code_declares_can_be_listed_and_paused_before_any_submit(app: App) -> None:
    _declare(app)  # nothing submitted, no worker: the declarations are not in the store yet
    client = local_client(app.asgi())
    assert _queue(client, HELD)["limits"]["global_limit"] == 4
    assert client.post(f"/api/v1/queues/{HELD}/pause").status_code == 200
    assert app.store.rules().paused == {HELD}


def test_a_paused_queue_s_run_shows_the_pause_first_then_its_full_scope(app: App) -> None:
    """GET /runs/{id}, /runs, /queue and /why say "paused" while it lasts (and the full scope, as `why`
    does), then only the full scope: the reason the claim recorded, and still true."""
    app.queue("one", concurrency=Concurrency(global_limit=1))

    @app.task(name="one_task", queue="one")
    def one_task() -> None:
        return None

    client = local_client(app.asgi())
    first, second = (client.post("/api/v1/runs", json={"task": "one_task"}).json()["id"] for _ in range(2))
    assert [run.id for run in app.store.cycle(CycleRequest("w1", ["one"], [], [], 5, 60)).claimed] == [first]
    stored = app.store.get_run(second).block_reason
    assert stored and stored[0]["scope"] == "queue:one"  # its last claim skipped it for the full queue

    assert client.post("/api/v1/queues/one/pause").status_code == 200
    paused = [{"scope": "queue:one", "reason": "paused", "detail": "queue one is paused"}, *stored]
    assert client.get(f"/api/v1/runs/{second}").json()["block_reason"] == paused
    assert next(run for run in client.get("/api/v1/runs").json()["runs"] if run["id"] == second)["block_reason"] == (
        paused
    )
    assert [run["block_reason"] for run in client.get("/api/v1/queue").json()["runs"]] == [paused]
    why = client.get(f"/api/v1/runs/{second}/why").json()
    assert why["paused"] is True and why["blocked_by"] == ["queue:one"]
    assert client.get(f"/api/v1/runs/{first}").json()["block_reason"] is None  # running: not held by the pause

    assert client.post("/api/v1/queues/one/resume").status_code == 200
    assert client.get(f"/api/v1/runs/{second}").json()["block_reason"] == stored
    assert client.get(f"/api/v1/runs/{second}/why").json()["paused"] is False
