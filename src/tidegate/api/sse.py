"""One server-sent-events response: store reads on wake-ups, a bounded queue, a sender.

Two tasks per client. The producer waits for a wake-up of the store (or the
backstop poll: a wake-up is a hint), lets a burst settle (debounce), reads
the events after its cursor in the thread pool, and queues their frames. The
sender writes frames to the socket as fast as the client reads them. The
queue between them is bounded (`queue_bound` frames): a burst waits for room,
so the producer reads no faster than the client takes, and a client whose
queue stays full for `stall` seconds is dropped, its connection closed. A
stalled reader costs the server one queue and one read batch, never more
(the store keeps every event: the client resumes with Last-Event-ID). An idle stream gets a comment every
`keepalive` seconds, so proxies and clients see it is alive.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from tidegate.api.gaps import InOrder
from tidegate.api.wakeups import Wakeups
from tidegate.domain.model import EventRecord
from tidegate.storage.port import Store

log = logging.getLogger("tidegate.api")
KEEPALIVE_FRAME = b": keep-alive\n\n"


@dataclass(frozen=True)
class StreamSettings:
    queue_bound: int = 256  # frames queued for one client at most
    stall: float = 5.0  # seconds a client's queue may stay full before the client is dropped
    read_batch: int = 200  # events per store read; a backlog takes several reads, each queued before the next
    debounce: float = 0.05  # seconds a burst of wake-ups is let settle into one read
    backstop: float = 1.0  # seconds between reads when no wake-up comes
    keepalive: float = 15.0  # seconds of silence before a keep-alive comment
    gap_patience: float = 0.5  # seconds events after a gap in ids are held back (gaps.py)


@dataclass
class StreamStats:
    """What the streams of one API did, for operators and tests: nothing here grows with traffic."""

    open: int = 0
    dropped: int = 0
    most_queued: int = 0  # the deepest any client's queue has been


class EventStream(Response):
    """The ASGI response of one client, from `cursor` on (events with a higher id)."""

    media_type = "text/event-stream"

    def __init__(
        self,
        store: Store,
        wakeups: Wakeups,
        settings: StreamSettings,
        stats: StreamStats,
        cursor: int,
        close_after: float | None = None,
    ) -> None:
        super().__init__(media_type=self.media_type)  # headers and body are sent by __call__, as they come
        self.store = store
        self.wakeups = wakeups
        self.settings = settings
        self.stats = stats
        self.cursor = cursor
        self.close_after = close_after
        self._frames: asyncio.Queue[bytes | None] = asyncio.Queue(maxsize=settings.queue_bound)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        sender = asyncio.create_task(self._send(send))
        gone = asyncio.create_task(_disconnected(receive))
        woken = await self.wakeups.subscribe()
        self.stats.open += 1
        try:
            if await self._produce(woken, sender, gone):
                await self._finish(sender)
            else:
                self.stats.dropped += 1
                log.warning("event stream dropped: the client took nothing for %.1fs", self.settings.stall)
        finally:
            self.stats.open -= 1
            for task in (sender, gone):
                task.cancel()
                if task.done() and not task.cancelled():
                    task.exception()  # a send to a closed socket: the client left, nothing to report
            await self.wakeups.unsubscribe(woken)

    async def _produce(self, woken: asyncio.Event, sender: asyncio.Task[None], gone: asyncio.Task[None]) -> bool:
        """Queue frames until the client leaves or `close_after` passes (True), or it falls behind (False)."""
        loop = asyncio.get_running_loop()
        settings = self.settings
        order = InOrder(self.cursor, settings.gap_patience)
        deadline = None if self.close_after is None else loop.time() + self.close_after
        quiet_since = loop.time()
        more = True  # read at once: a resuming client may have a backlog
        while True:
            if sender.done() or gone.done() or (deadline is not None and loop.time() >= deadline):
                return True
            if not more:
                timeout = settings.gap_patience if order.waiting else settings.backstop
                if deadline is not None:
                    timeout = min(timeout, deadline - loop.time())
                await _first(woken.wait(), sender, gone, within=max(0.0, timeout))
                if sender.done() or gone.done() or (deadline is not None and loop.time() >= deadline):
                    return True
                if woken.is_set():
                    await asyncio.sleep(settings.debounce)
                    woken.clear()
            events = await asyncio.to_thread(self.store.events_after, order.cursor, settings.read_batch)
            ready = order.take(events, loop.time())
            frames = [_frame(event) for event in ready]
            if not frames and loop.time() - quiet_since >= settings.keepalive:
                frames = [KEEPALIVE_FRAME]
            for frame in frames:
                if not await self._queue(frame):
                    return False
                quiet_since = loop.time()
            more = len(events) == settings.read_batch and len(ready) == len(events)

    async def _queue(self, frame: bytes | None) -> bool:
        """Queue a frame, waiting up to `stall` seconds for room; False: the client is too slow."""
        try:
            self._frames.put_nowait(frame)
        except asyncio.QueueFull:
            try:
                await asyncio.wait_for(self._frames.put(frame), self.settings.stall)
            except TimeoutError:
                return False
        self.stats.most_queued = max(self.stats.most_queued, self._frames.qsize())
        return True

    async def _send(self, send: Send) -> None:
        while (frame := await self._frames.get()) is not None:
            await send({"type": "http.response.body", "body": frame, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _finish(self, sender: asyncio.Task[None]) -> None:
        """End the body cleanly if the client still reads; never wait on a stalled one past a keep-alive."""
        if sender.done() or not await self._queue(None):
            return
        with contextlib.suppress(TimeoutError, asyncio.CancelledError, OSError):
            await asyncio.wait_for(asyncio.shield(sender), self.settings.keepalive)


async def _disconnected(receive: Receive) -> None:
    message: Message = {"type": ""}
    while message["type"] != "http.disconnect":
        message = await receive()


async def _first(wait: Coroutine[Any, Any, Any], *tasks: asyncio.Task[None], within: float) -> None:
    """Until `wait` completes, any of `tasks` ends, or `within` seconds pass."""
    waiter = asyncio.ensure_future(wait)
    try:
        await asyncio.wait({waiter, *tasks}, timeout=within, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()


def _frame(event: EventRecord) -> bytes:
    """`id:` lets a client resume (Last-Event-ID); `event:` is the type, so a listener can pick the ones it wants."""
    data = {
        "id": event.id,
        "run_id": event.run_id,
        "step_key": event.step_key,
        "type": event.type,
        "metadata": event.metadata,
        "at": event.at.isoformat(),
    }
    return f"id: {event.id}\nevent: {event.type}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()
