"""A store call that waits never blocks the server's event loop.

SQLite makes a wait easy to cause: while another connection holds the write
lock, a submit waits in the store (busy timeout). Meanwhile the same server,
on its one event loop, must still answer /healthz and reads, because store
calls run in the thread pool. Were an endpoint to call the store on the
loop, /healthz would hang until the submit ends, and the submit waits for the
lock the test releases only once the reads are answered: so the proof is an
order (the submit still waits when the reads are back), not a time.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time

import httpx

from tests.apps.api import live_server
from tidegate import App


def test_health_and_reads_answer_while_a_submit_waits_for_the_store(sqlite_url: str) -> None:
    with App(sqlite_url) as app:

        @app.task(name="add")
        def add(a: int) -> int:
            return a

        app.submit("add", {"a": 0})  # tasks registered, store open
        with live_server(app.asgi()) as base_url:
            answers: dict[str, httpx.Response] = {}
            blocker = sqlite3.connect(sqlite_url[len("sqlite:///") :], isolation_level=None)
            with contextlib.closing(blocker):
                blocker.execute("BEGIN IMMEDIATE")
                submitting = threading.Thread(
                    target=lambda: answers.update(
                        submit=httpx.post(f"{base_url}/api/v1/runs", json={"task": "add", "args": {"a": 1}}, timeout=60)
                    )
                )
                submitting.start()
                time.sleep(0.3)  # the submit is now waiting for the write lock
                health = httpx.get(f"{base_url}/healthz", timeout=60)
                listed = httpx.get(f"{base_url}/api/v1/runs", timeout=60)
                assert submitting.is_alive(), "the reads answered only once the submit stopped waiting: loop blocked?"
                blocker.execute("ROLLBACK")
            submitting.join(60)

    assert health.status_code == 200 and listed.status_code == 200
    assert answers["submit"].status_code == 201
