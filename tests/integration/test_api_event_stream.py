"""`GET /api/v1/events/stream`: server-sent events, on time, resumable, and never buffered without bound.

A connected client gets a run's RunCompleted within a second of the
completion, measured against the event's own time (the store's clock), not
a sleep. A client that resumes with Last-Event-ID gets exactly the events
after that id, in order; one without starts at the new ones. A client that
stops reading is dropped once its bounded queue stays full, and the
server's queue for it never grew past its bound.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

import httpx

from tests.apps.api import live_server
from tests.conftest import wait_until
from tidegate import App
from tidegate.api.sse import StreamSettings

STREAM = "/api/v1/events/stream"


def _quick() -> None:
    return None


def _events(lines: Iterable[str]) -> Iterator[dict[str, Any]]:
    """Parse server-sent events: each frame's `id:` and `event:` checked against its JSON data."""
    frame: dict[str, str] = {}
    for line in lines:
        if line.startswith(":"):
            continue  # a keep-alive comment
        if line:
            field, _, value = line.partition(": ")
            frame[field] = value
            continue
        if frame:
            data = json.loads(frame["data"])
            assert int(frame["id"]) == data["id"] and frame["event"] == data["type"]
            yield data
            frame = {}


def test_a_connected_client_gets_run_completed_within_a_second_of_the_completion(app: App, start_worker) -> None:
    task = app.task(name="quick")(_quick)
    app.store.check_schema()
    received: dict[str, Any] = {}
    connected = threading.Event()
    with live_server(app.asgi()) as base:

        def listen() -> None:
            with httpx.stream("GET", f"{base}{STREAM}", params={"close_after": 60}, timeout=60) as response:
                assert response.headers["content-type"].startswith("text/event-stream")
                connected.set()
                for event in _events(response.iter_lines()):
                    if event["type"] == "RunCompleted":
                        received.update(event=event, at=time.time())
                        return

        listener = threading.Thread(target=listen, daemon=True)
        listener.start()
        assert connected.wait(30)
        start_worker()
        handle = task.submit()
        listener.join(30)
    completion = received["event"]
    assert completion["run_id"] == handle.id
    lag = received["at"] - datetime.fromisoformat(completion["at"]).timestamp()
    assert lag < 1.0, f"RunCompleted reached the client {lag:.3f}s after the completion"


def test_a_client_resumes_after_its_last_event_id_and_a_new_one_starts_at_new_events(app: App) -> None:
    task = app.task(name="quick")(_quick)
    task.submit_many([{}, {}, {}])
    stored = app.store.events_after(0, 100)
    assert len(stored) >= 3
    with live_server(app.asgi()) as base:
        resumed = httpx.get(
            f"{base}{STREAM}", params={"close_after": 1}, headers={"Last-Event-ID": str(stored[0].id)}, timeout=30
        )
        fresh = httpx.get(f"{base}{STREAM}", params={"close_after": 0.5}, timeout=30)
        refused = httpx.get(f"{base}{STREAM}", headers={"Last-Event-ID": "yesterday"}, timeout=30)
    assert resumed.status_code == 200
    assert [event["id"] for event in _events(resumed.text.splitlines())] == [event.id for event in stored[1:]]
    assert fresh.status_code == 200 and list(_events(fresh.text.splitlines())) == []
    assert refused.status_code == 422


def test_a_client_that_stops_reading_is_dropped_and_its_queue_stays_bounded(app: App) -> None:
    task = app.task(name="quick")(_quick)
    app.store.check_schema()
    api = app.asgi()
    streams = api.state.event_streams
    streams.settings = StreamSettings(queue_bound=16, stall=0.5)
    with live_server(api) as base:
        address = urlsplit(base)
        stalled = socket.socket()
        stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a small window: the server's writes back up
        stalled.connect((address.hostname, address.port))
        stalled.sendall(f"GET {STREAM} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
        wait_until(lambda: streams.stats.open == 1, message="the stream to open")
        written = 0
        for _ in range(50):  # ~250 bytes an event: enough to fill every buffer on the way many times over
            if streams.stats.dropped:
                break
            written += len(task.submit_many([{}] * 1000))
            time.sleep(0.2)
        wait_until(lambda: streams.stats.dropped == 1, message="the stalled client to be dropped")
        assert streams.stats.most_queued <= 16
        stalled.settimeout(30)
        read = bytearray()
        while chunk := stalled.recv(65536):  # the server closed the connection: this ends
            read += chunk
        stalled.close()
        wait_until(lambda: streams.stats.open == 0, message="the stream to be gone")
    assert read.count(b"\nevent: RunQueued\n") < written, "the dropped client got every event: they were buffered"
