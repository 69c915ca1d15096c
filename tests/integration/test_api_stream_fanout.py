"""Event streams at scale: one store read per wake-up feeds every stream, and streams are capped.

Each stream used to read the store on each wake-up, so a batch of submits
cost one read per open stream. Here 500 real clients stream from a live
server while runs are submitted, and the store's `events_after` is counted:
the reads do not grow with the clients. Past the per-server or per-token cap
a stream is refused with 429, a JSON body naming the cap and Retry-After.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import httpx
import pytest

from tests.apps.api import live_server
from tests.conftest import wait_until
from tidegate import App
from tidegate.api import Tokens, create_api
from tidegate.api.sse import StreamSettings
from tidegate.app import settings
from tidegate.domain.errors import ConfigurationError

STREAM = "/api/v1/events/stream"
CLIENTS = 500
FULL, READ = "full-token-0123456789", "read-token-0123456789"


def _quick() -> None:
    return None


@contextmanager
def _counted_reads(app: App) -> Iterator[tuple[list[int], Callable[[int, int], Any]]]:
    """The store's `events_after` calls, counted (the real verb answers each), and the verb uncounted."""
    store = app.store
    real = store.events_after
    calls = [0]
    lock = threading.Lock()

    def counted(after: int, limit: int) -> Any:
        with lock:
            calls[0] += 1
        return real(after, limit)

    store.events_after = counted  # type: ignore[method-assign]
    try:
        yield calls, real
    finally:
        del store.events_after  # the class's method again


async def _follow(client: httpx.AsyncClient, url: str, opened: asyncio.Event, last: list[int]) -> list[int]:
    """One client: the ids it receives, until it has `last[0]` (set once the runs are submitted; the
    keep-alive comment every second has it looked at again when the last event came before it was set)."""
    ids: list[int] = []
    async with client.stream("GET", url, params={"close_after": 120}) as response:
        assert response.status_code == 200
        opened.set()
        async for line in response.aiter_lines():
            if line.startswith("data: "):
                ids.append(json.loads(line[6:])["id"])
            if last and ids and ids[-1] >= last[0]:
                return ids
    return ids


def test_one_store_read_per_wake_up_feeds_500_streams(app: App) -> None:
    task = app.task(name="quick")(_quick)
    app.store.check_schema()
    api = app.asgi()
    streams = api.state.event_streams
    streams.settings = StreamSettings(max_streams=CLIENTS, max_streams_per_token=CLIENTS, keepalive=1.0)
    last: list[int] = []
    with live_server(api) as base, _counted_reads(app) as (reads, uncounted):

        async def main() -> tuple[list[list[int]], int, int]:
            limits = httpx.Limits(max_connections=CLIENTS + 10, max_keepalive_connections=0)
            async with httpx.AsyncClient(limits=limits, timeout=120) as client:
                openings = [asyncio.Event() for _ in range(CLIENTS)]
                followers = [asyncio.create_task(_follow(client, f"{base}{STREAM}", o, last)) for o in openings]
                await asyncio.wait_for(asyncio.gather(*(o.wait() for o in openings)), 120)
                await asyncio.to_thread(wait_until, lambda: streams.stats.open == CLIENTS, 120)
                before = reads[0], streams.stats.reads
                handles = await asyncio.to_thread(task.submit_many, [{}] * 50)
                last.append(uncounted(0, 10_000)[-1].id)
                received = await asyncio.wait_for(asyncio.gather(*followers), 120)
                assert len(handles) == 50
                return received, reads[0] - before[0], streams.stats.reads - before[1]

        received, store_reads, shared_reads = asyncio.run(main())
    expected_tail = [event.id for event in app.store.events_after(0, 10_000)]
    for ids in received:
        assert ids == expected_tail[len(expected_tail) - len(ids) :]  # in order, none missed, none twice
        assert ids[-1] == last[0] and len(ids) >= 50
    assert streams.stats.catchup_reads == 0
    # the events went to 500 clients for a handful of reads, all the shared reader's (one per wake-up
    # or backstop second); each client reading the store on each wake-up made this >= 500
    # (a read in flight when the counts were taken is the store's before and the reader's after)
    assert shared_reads - 1 <= store_reads <= shared_reads
    assert store_reads < CLIENTS / 10, f"{store_reads} store reads fed {CLIENTS} streams"


def _open(stack: ExitStack, client: httpx.Client, path: str, token: str | None = None) -> httpx.Response:
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    return stack.enter_context(client.stream("GET", path, params={"close_after": 60}, headers=headers))


def _refused(response: httpx.Response, cap: str, limit: int) -> None:
    assert response.status_code == 429
    assert response.headers["retry-after"] == "30"
    body = json.loads(response.read())
    assert body["error"] == "too_many_streams" and body["cap"] == cap and body["limit"] == limit
    assert cap in body["detail"] and "retry after 30s" in body["detail"]


def test_the_stream_past_the_server_cap_is_refused_with_429_naming_the_cap(app: App) -> None:
    app.store.check_schema()
    api = app.asgi()
    streams = api.state.event_streams
    streams.settings = StreamSettings(max_streams=3, max_streams_per_token=10)
    with live_server(api) as base, httpx.Client(base_url=base, timeout=30) as client, ExitStack() as stack:
        opened = [_open(stack, client, STREAM) for _ in range(3)]
        assert [response.status_code for response in opened] == [200, 200, 200]
        _refused(_open(stack, client, STREAM), "TIDEGATE_STREAMS_MAX", 3)
        _refused(_open(stack, client, "/live/events"), "TIDEGATE_STREAMS_MAX", 3)  # the dashboard's too
        opened[0].close()
        wait_until(lambda: streams.stats.open == 2, message="the closed stream to give its place back")
        assert _open(stack, client, STREAM).status_code == 200
        assert streams.stats.refused == 2


def test_a_token_past_its_stream_cap_is_refused_while_the_other_token_streams(app: App) -> None:
    app.store.check_schema()
    api = create_api(app, tokens=Tokens(full=FULL, read=READ))
    streams = api.state.event_streams
    streams.settings = StreamSettings(max_streams=5, max_streams_per_token=3)
    with live_server(api) as base, httpx.Client(base_url=base, timeout=30) as client, ExitStack() as stack:
        assert [_open(stack, client, STREAM, READ).status_code for _ in range(3)] == [200] * 3
        _refused(_open(stack, client, STREAM, READ), "TIDEGATE_STREAMS_PER_TOKEN", 3)
        client.cookies.set("tidegate_token", READ)  # the dashboard's stream counts for the token of its cookie
        _refused(_open(stack, client, "/live/events"), "TIDEGATE_STREAMS_PER_TOKEN", 3)
        client.cookies.clear()
        assert [_open(stack, client, STREAM, FULL).status_code for _ in range(2)] == [200] * 2
        _refused(_open(stack, client, STREAM, FULL), "TIDEGATE_STREAMS_MAX", 5)
        assert _open(stack, client, STREAM, "not-a-token").status_code == 401  # counted for nobody


@pytest.mark.parametrize("value", ["many", "0", "-3", "1.5", "²", "100001"])
def test_a_stream_cap_that_cannot_work_is_refused_naming_the_variable(app: App, monkeypatch, value: str) -> None:
    monkeypatch.setenv("TIDEGATE_STREAMS_PER_TOKEN", value)
    with pytest.raises(ConfigurationError, match=r"^TIDEGATE_STREAMS_PER_TOKEN: .* is not a whole number from 1"):
        create_api(app)
    monkeypatch.setenv("TIDEGATE_STREAMS_PER_TOKEN", " 7 ")
    assert settings.count_setting("TIDEGATE_STREAMS_PER_TOKEN") == 7
    assert create_api(app).state.event_streams.settings.max_streams_per_token == 7
