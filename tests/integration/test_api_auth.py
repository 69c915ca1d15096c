"""Who may call the API: open on loopback without tokens; with tokens, bearer only, read vs full.

The full token may do everything; the read token reads and gets 403 on every
mutation (nothing stored); a missing or wrong token gets 401 everywhere but
/healthz. A wider bind than loopback without a token is refused. Without a
token, a request addressed to a non-loopback host (DNS rebinding) or sent by
another site's page (Origin) is refused, and a body must be declared JSON
(a cross-site form cannot submit). With or without a token, a change (POST,
PUT, PATCH, DELETE) sent by a page of any other origin than the server's own
(another port of localhost included) is refused.
"""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from tests.apps.api import local_client, store_size
from tidegate import App, ConfigurationError
from tidegate.api import Tokens, check_bind, create_api

FULL, READ = "full-secret-token", "read-secret-token"
SUBMIT = {"task": "add", "args": {"a": 1}}
READS = [
    "/api/v1/runs", "/api/v1/runs/{id}", "/api/v1/runs/{id}/events", "/readyz", "/api/v1/openapi.json", "/api/docs",
]  # fmt: skip
WRITES = [("/api/v1/runs", SUBMIT), ("/api/v1/runs/batch", {"runs": [SUBMIT]}), ("/api/v1/runs/{id}/cancel", None)]


@pytest.fixture
def guarded(app: App) -> tuple[TestClient, str]:
    @app.task(name="add")
    def add(a: int) -> int:
        return a

    run_id = app.submit("add", {"a": 0}).id
    return local_client(create_api(app, tokens=Tokens(full=FULL, read=READ))), run_id


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.mark.parametrize("headers", [{}, _bearer("wrong"), {"Authorization": FULL}, {"Authorization": f"Basic {FULL}"}])
def test_without_a_valid_token_only_healthz_answers(guarded, database_url, headers) -> None:
    client, run_id = guarded
    before = store_size(database_url)
    assert client.get("/healthz", headers=headers).status_code == 200
    for path in READS:
        response = client.get(path.format(id=run_id), headers=headers)
        assert response.status_code == 401, path
        assert response.json()["error"] == "unauthorized" and response.headers["WWW-Authenticate"] == "Bearer"
    for path, body in WRITES:
        assert client.post(path.format(id=run_id), json=body, headers=headers).status_code == 401, path
    assert store_size(database_url) == before


def test_the_read_token_reads_and_gets_403_on_every_mutation(guarded, database_url) -> None:
    client, run_id = guarded
    for path in READS:
        assert client.get(path.format(id=run_id), headers=_bearer(READ)).status_code == 200, path
    before = store_size(database_url)
    for path, body in WRITES:
        response = client.post(path.format(id=run_id), json=body, headers=_bearer(READ))
        assert (response.status_code, response.json()["error"]) == (403, "forbidden"), path
    assert store_size(database_url) == before
    assert client.get(f"/api/v1/runs/{run_id}", headers=_bearer(READ)).json()["status"] == "queued"


def test_the_full_token_may_mutate(guarded) -> None:
    client, run_id = guarded
    assert client.post("/api/v1/runs", json=SUBMIT, headers=_bearer(FULL)).status_code == 201
    assert client.post(f"/api/v1/runs/{run_id}/cancel", headers=_bearer(FULL)).json()["status"] == "canceled"


def test_loopback_without_a_token_is_open(app: App, monkeypatch) -> None:
    monkeypatch.delenv("TIDEGATE_API_TOKEN", raising=False)
    monkeypatch.delenv("TIDEGATE_API_READ_TOKEN", raising=False)

    @app.task(name="add")
    def add(a: int) -> int:
        return a

    client = local_client(app.asgi())
    assert client.post("/api/v1/runs", json=SUBMIT).status_code == 201
    assert client.get("/api/v1/runs").status_code == 200


def test_tokens_come_from_the_environment(app: App, monkeypatch) -> None:
    monkeypatch.setenv("TIDEGATE_API_READ_TOKEN", READ)
    monkeypatch.delenv("TIDEGATE_API_TOKEN", raising=False)
    client = local_client(app.asgi())
    assert client.get("/api/v1/runs").status_code == 401
    assert client.get("/api/v1/runs", headers=_bearer(READ)).status_code == 200
    assert client.post("/api/v1/runs", json=SUBMIT, headers=_bearer(READ)).status_code == 403


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.20", "example.com"])
def test_a_wider_bind_needs_a_token(host: str) -> None:
    with pytest.raises(ConfigurationError, match="without a token"):
        check_bind(host, Tokens())
    check_bind(host, Tokens(read="r" * 24))  # any token: every route but /healthz is then guarded


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "::1", "127.0.0.2"])
def test_loopback_needs_no_token(host: str) -> None:
    check_bind(host, Tokens())


@pytest.fixture
def open_client(app: App, monkeypatch) -> TestClient:
    monkeypatch.delenv("TIDEGATE_API_TOKEN", raising=False)
    monkeypatch.delenv("TIDEGATE_API_READ_TOKEN", raising=False)

    @app.task(name="add")
    def add(a: int) -> int:
        return a

    app.store.check_schema()  # the store is open (and migrated) before the first request: its rows can be counted
    return local_client(app.asgi())


@pytest.mark.parametrize(
    "headers",
    [
        {"Host": "attacker.example:8000"},  # a DNS name rebound to 127.0.0.1
        {"Origin": "https://attacker.example"},
        {"Origin": "null"},
    ],
)
def test_without_a_token_only_this_machine_may_call(open_client, database_url, headers) -> None:
    before = store_size(database_url)
    response = open_client.post("/api/v1/runs", json=SUBMIT, headers=headers)
    assert (response.status_code, response.json()["error"]) == (403, "forbidden")
    assert open_client.get("/api/v1/runs", headers=headers).status_code == 403
    assert store_size(database_url) == before


@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": "http://localhost:8000", "Host": "localhost:8000"},
        {"Origin": "http://LocalHost:8000", "Host": "localhost:8000"},  # hosts compare without case
        {"Origin": "http://127.0.0.1"},  # the default port, written or not (the client's Host has none)
        {"Origin": "http://127.0.0.1:80"},
        {"Referer": "http://127.0.0.1/queue?x=1"},  # no Origin: the page's address names it
        {},  # no page at all: curl, an SDK
    ],
)
def test_a_page_of_this_server_may_change_things(open_client, headers) -> None:
    assert open_client.post("/api/v1/runs", json=SUBMIT, headers=headers).status_code == 201


ANOTHER_PAGE = [
    {"Origin": "http://localhost:3000"},  # another local app or dev server: another origin
    {"Origin": "http://127.0.0.1:8000"},  # another port
    {"Origin": "https://127.0.0.1"},  # another scheme
    {"Origin": "http://localhost"},  # another name for this machine is another origin too
    {"Origin": "null"},  # a sandboxed or privacy-stripped page
    {"Referer": "http://localhost:3000/app"},
    {"Origin": "http://localhost:3000", "Referer": "http://127.0.0.1/"},  # Origin decides when both come
]


@pytest.mark.parametrize("headers", ANOTHER_PAGE)
def test_a_change_sent_by_another_origins_page_is_refused(app, open_client, database_url, headers) -> None:
    run_id = open_client.post("/api/v1/runs", json=SUBMIT).json()["id"]
    before = store_size(database_url)
    changes = [
        ("POST", f"/api/v1/runs/{run_id}/cancel", None),  # body-less: CORS-simple, no preflight asks first
        ("POST", "/api/v1/queues/default/pause", None),
        ("POST", "/api/v1/sweep", None),
        ("POST", "/api/v1/runs", SUBMIT),
        ("PUT", "/api/v1/limits", {"target": "queue:default", "limit": 1}),
        ("DELETE", "/api/v1/limits", None),
    ]
    for method, path, body in changes:
        response = open_client.request(method, path, json=body, headers=headers)
        assert (response.status_code, response.json()["error"]) == (403, "forbidden"), path
        assert "not of this server" in response.json()["detail"]
    assert store_size(database_url) == before
    assert open_client.get(f"/api/v1/runs/{run_id}").json()["status"] == "queued"
    assert not app.store.rules().is_paused("default")


def test_a_token_does_not_let_another_origins_page_change_things(guarded) -> None:
    client, run_id = guarded
    response = client.post(f"/api/v1/runs/{run_id}/cancel", headers={**_bearer(FULL), **ANOTHER_PAGE[0]})
    assert response.status_code == 403
    assert client.get(f"/api/v1/runs/{run_id}", headers=_bearer(FULL)).json()["status"] == "queued"


@pytest.mark.parametrize("content_type", ["application/x-www-form-urlencoded", "text/plain", "multipart/form-data"])
def test_a_submit_body_must_be_declared_json(open_client, database_url, content_type) -> None:
    before = store_size(database_url)
    body = b'{"task": "add", "args": {"a": 1}}'
    response = open_client.post("/api/v1/runs", content=body, headers={"Content-Type": content_type})
    assert (response.status_code, response.json()["error"]) == (415, "unsupported_media_type")
    declared = open_client.post("/api/v1/runs", content=body, headers={"Content-Type": "application/json"})
    assert declared.status_code == 201
    assert store_size(database_url)[0] == before[0] + 1
