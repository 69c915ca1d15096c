"""Probes: /healthz answers while the process does; /readyz only while the store answers a read.

An unreachable store is a 503 with the store's one-line reason, its password
masked, never a traceback; /healthz stays 200 so an orchestrator restarts
nothing that a database outage would not fix.
"""

from __future__ import annotations

from tests.apps.api import local_client
from tidegate import App

UNREACHABLE = "postgresql://postgres:hunter2@127.0.0.1:1/test"  # port 1: refused at once


def test_readyz_follows_the_store_and_healthz_the_process(app: App) -> None:
    client = local_client(app.asgi())
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/readyz").json() == {"status": "ok"}


def test_an_unreachable_store_is_503_with_its_password_masked() -> None:
    with App(UNREACHABLE) as app:
        client = local_client(app.asgi())
        assert client.get("/healthz").status_code == 200
        for response in (client.get("/readyz"), client.get("/api/v1/runs")):
            assert (response.status_code, response.json()["error"]) == (503, "store_unavailable")
            assert "hunter2" not in response.text and "Traceback" not in response.text
