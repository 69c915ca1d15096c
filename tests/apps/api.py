"""Helpers of the HTTP API tests: a live server on a free loopback port, and the store's size.

The live server is uvicorn in a thread of the test process, serving the
same ASGI application `tidegate serve` runs, over real sockets.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn
from fastapi.testclient import TestClient

from tests.conftest import execute_sql


def local_client(api: Any) -> TestClient:
    """An in-process client addressing the API as 127.0.0.1 (without a token it answers only loopback)."""
    return TestClient(api, base_url="http://127.0.0.1")


@contextmanager
def live_server(api: Any) -> Iterator[str]:
    """Serve `api` on 127.0.0.1 (a port the system picks); yield its base URL; stop it after."""
    server = uvicorn.Server(uvicorn.Config(api, host="127.0.0.1", port=0, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, name="uvicorn", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the test server did not start")
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(30)


def store_size(database_url: str) -> tuple[int, int]:
    """(runs, events) stored: what a refused request must leave unchanged."""
    runs = execute_sql(database_url, "SELECT count(*) FROM tidegate_runs")[0][0]
    events = execute_sql(database_url, "SELECT count(*) FROM tidegate_events")[0][0]
    return runs, events
