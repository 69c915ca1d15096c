"""`GET /api/v1/events/stream`: new events as server-sent events, resumable with Last-Event-ID.

For the dashboard and for scripts: one `text/event-stream` response per
client, each event framed with its id, so a client that reconnects (as
browsers' EventSource does by itself) sends `Last-Event-ID` and misses
nothing. The mechanics (wake-ups, bounded queue, keep-alive) are `sse.py`;
`close_after` bounds a stream for a script that wants to wait a while and
stop (and for the API's fuzz test, which reads each answer to its end).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Request
from starlette.concurrency import run_in_threadpool

from tidegate.api.documented import READ_ERRORS, json_error
from tidegate.api.routing import PREFIX
from tidegate.api.security import can_read
from tidegate.api.sse import EventStream, StreamSettings, StreamStats
from tidegate.api.wakeups import Wakeups
from tidegate.app import App
from tidegate.storage.port import Store

MAX_EVENT_ID = 2**63 - 1  # the events table's bigint
MAX_CLOSE_AFTER = 86_400.0


class EventStreams:
    """What the streams of one API share: the store's wake-ups, the settings, the counts."""

    def __init__(self, store: Callable[[], Store], settings: StreamSettings | None = None) -> None:
        self.wakeups = Wakeups(store)
        self.settings = settings or StreamSettings()
        self.stats = StreamStats()


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
) -> EventStream:
    streams: EventStreams = request.app.state.event_streams
    store = await run_in_threadpool(_store, request)  # opening it may connect: off the loop
    cursor = last_event_id if last_event_id is not None else await run_in_threadpool(store.last_event_id)
    return EventStream(store, streams.wakeups, streams.settings, streams.stats, cursor, close_after)


def _store(request: Request) -> Store:
    app: App = request.app.state.tidegate
    return app.store
