"""`GET /api/v1/events/stream`: new events as server-sent events, resumable with Last-Event-ID.

For the dashboard and for scripts: one `text/event-stream` response per
client, each event framed with its id, so a client that reconnects (as
browsers' EventSource does by itself) sends `Last-Event-ID` and misses
nothing. One reader per server feeds every stream (`fanout.py`); the
per-client mechanics (bounded queue, keep-alive) are `sse.py`. `close_after`
bounds a stream for a script that wants to wait a while and stop (and for the
API's fuzz test, which reads each answer to its end).

Streams are capped per server (`TIDEGATE_STREAMS_MAX`) and per token
(`TIDEGATE_STREAMS_PER_TOKEN`; without tokens every client is the same
party): past a cap the request is answered 429 with `Retry-After`, naming the
cap, before anything is read.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Request
from starlette.responses import Response

from tidegate.api.documented import READ_ERRORS, json_error
from tidegate.api.errors import error_response
from tidegate.api.fanout import EventHub
from tidegate.api.routing import PREFIX
from tidegate.api.security import Tokens, can_read
from tidegate.api.sse import EventStream, StreamSettings, StreamStats
from tidegate.api.wakeups import Wakeups
from tidegate.app import settings as tunables
from tidegate.bootstrap import Store
from tidegate.dashboard.access import presented

MAX_EVENT_ID = 2**63 - 1  # the events table's bigint
MAX_CLOSE_AFTER = 86_400.0


class EventStreams:
    """What the streams of one API share: the reader of each event loop, the caps, the counts."""

    def __init__(self, store: Callable[[], Store], settings: StreamSettings | None = None) -> None:
        self.store = store  # the app's, opened on first use (in a thread: it may connect)
        self.wakeups = Wakeups(store)
        self.settings = settings or StreamSettings()
        self.stats = StreamStats()
        self._hubs: dict[asyncio.AbstractEventLoop, EventHub] = {}  # one per loop: uvicorn runs one
        self._held: Counter[str] = Counter()  # open (or opening) streams per party

    @classmethod
    def from_environment(cls, store: Callable[[], Store]) -> EventStreams:
        caps = StreamSettings(
            max_streams=tunables.count_setting("TIDEGATE_STREAMS_MAX"),
            max_streams_per_token=tunables.count_setting("TIDEGATE_STREAMS_PER_TOKEN"),
        )
        return cls(store, caps)

    def admit(self, party: str) -> Response | None:
        """Take a place for a stream of `party`; the refusal to answer instead when a cap is reached."""
        settings = self.settings
        if self._held.total() >= settings.max_streams:
            cap, limit, whose = "TIDEGATE_STREAMS_MAX", settings.max_streams, "this server"
        elif self._held[party] >= settings.max_streams_per_token:
            cap, limit, whose = "TIDEGATE_STREAMS_PER_TOKEN", settings.max_streams_per_token, "this token"
        else:
            self._held[party] += 1
            return None
        self.stats.refused += 1
        retry = settings.refused_retry
        detail = f"too many event streams: {whose} has {limit} open, the most {cap} allows; retry after {retry}s"
        headers = {"Retry-After": str(retry)}
        return error_response(429, "too_many_streams", detail, headers=headers, retry_after=retry, cap=cap, limit=limit)

    def release(self, party: str) -> None:
        self._held[party] -= 1
        if self._held[party] <= 0:
            del self._held[party]

    @asynccontextmanager
    async def joined(self) -> AsyncIterator[EventHub]:
        """The reader of this event loop for as long as a stream runs: the first starts it, the last stops it."""
        loop = asyncio.get_running_loop()
        hub = self._hubs.get(loop)
        if hub is None:
            hub = self._hubs[loop] = self._hub()
        hub.streams += 1
        try:
            await hub.started()
            yield hub
        finally:
            hub.streams -= 1
            if hub.streams == 0:
                if self._hubs.get(loop) is hub:
                    del self._hubs[loop]
                await hub.stop()

    def _hub(self) -> EventHub:
        settings = self.settings
        return EventHub(
            self.store, self.wakeups, self.stats, ring=settings.ring, read_batch=settings.read_batch,
            debounce=settings.debounce, backstop=settings.backstop, gap_patience=settings.gap_patience,
            catchup_reads=settings.catchup_reads,
        )  # fmt: skip


def party_of(request: Request) -> str:
    """Whose stream this is, for the per-token cap: a digest of the token presented (the API's bearer
    header or the dashboard's cookie, already checked), or one party for all when no token is set."""
    tokens: Tokens = request.app.state.tokens
    token = presented(request) if tokens.required else None
    return "" if token is None else hashlib.sha256(token.encode("utf-8", "surrogateescape")).hexdigest()


router = APIRouter(prefix=PREFIX, tags=["events"])
# One server-sent event: `data` is the event as JSON (id, run_id, step_key, type, metadata, at).
_SENT_EVENT = {
    "type": "object",
    "properties": {
        "id": {"type": "string", "pattern": "^[0-9]+$"},
        "event": {"type": "string"},
        "data": {"type": "string", "contentMediaType": "application/json"},
    },
    "required": ["id", "event", "data"],
}
_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "content": {"text/event-stream": {"schema": _SENT_EVENT}},
        "description": "Events as they are written: `id:` (for Last-Event-ID), `event:` (the type), `data:` (JSON).",
    },
    **READ_ERRORS,
    422: json_error("A value is not acceptable; `field` names it."),
    429: json_error("Too many streams open on this server or for this token: `cap` names the limit (Retry-After)."),
}


@router.get(
    "/events/stream", response_class=EventStream, status_code=200, responses=_RESPONSES, dependencies=[can_read],
    summary="Stream new events (server-sent events)",
)  # fmt: skip
async def stream_events(
    request: Request,
    last_event_id: Annotated[
        int | None,
        Header(alias="Last-Event-ID", ge=0, le=MAX_EVENT_ID, description="Resume after this event id."),
    ] = None,
    close_after: Annotated[
        float | None,
        Query(gt=0, le=MAX_CLOSE_AFTER, description="End the stream after this many seconds (default: never)."),
    ] = None,
) -> Response:
    streams: EventStreams = request.app.state.event_streams
    party = party_of(request)
    refused = streams.admit(party)
    if refused is not None:
        return refused
    return EventStream(
        streams.joined, streams.settings, streams.stats, last_event_id, close_after,
        release=lambda: streams.release(party),
    )  # fmt: skip
