"""One server-sent-events response: frames from the shared reader's ring, a bounded queue, a sender.

Two tasks per client. The producer copies the frames after its cursor from
the server's one reader (`fanout.EventHub`: one store read per wake-up for
every stream) into a bounded queue (`queue_bound` frames), and waits for the
reader's news when it has them all. The sender writes what is queued to the
socket, as one write per batch, as fast as the client reads. A burst waits for
room in the queue, so a client is never handed more than it takes, and a
client whose queue stays full for `stall` seconds is dropped, its connection
closed: a stalled reader costs the server one queue of references to shared
frames, never more (the store keeps every event: the client resumes with
Last-Event-ID). An idle stream gets a comment every `keepalive` seconds, so
proxies and clients see it is alive.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable, Coroutine
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any

from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from tidegate.api.fanout import EventHub, StreamStats

log = logging.getLogger("tidegate.api")
KEEPALIVE_FRAME = b": keep-alive\n\n"
__all__ = ["EventStream", "StreamSettings", "StreamStats"]


@dataclass(frozen=True)
class StreamSettings:
    queue_bound: int = 256  # frames queued for one client at most
    stall: float = 5.0  # seconds a client's queue may stay full before the client is dropped
    read_batch: int = 200  # events per store read; a backlog takes several reads
    ring: int = 4096  # recent frames the shared reader keeps: a burst this big needs no stream to read
    catchup_reads: int = 4  # streams reading below the ring at once (the others wait their turn)
    debounce: float = 0.05  # seconds a burst of wake-ups is let settle into one read
    backstop: float = 1.0  # seconds between reads when no wake-up comes
    keepalive: float = 15.0  # seconds of silence before a keep-alive comment
    gap_patience: float = 0.5  # seconds events after a gap in ids are held back (gaps.py)
    max_streams: int = 200  # open streams per server (TIDEGATE_STREAMS_MAX)
    max_streams_per_token: int = 100  # open streams per token (TIDEGATE_STREAMS_PER_TOKEN)
    refused_retry: int = 30  # Retry-After (seconds) of a stream refused by a cap


Join = Callable[[], AbstractAsyncContextManager[EventHub]]  # the shared reader, for the stream's lifetime


class EventStream(Response):
    """The ASGI response of one client, from `cursor` on (events with a higher id; None: the newest)."""

    media_type = "text/event-stream"

    def __init__(
        self,
        join: Join,
        settings: StreamSettings,
        stats: StreamStats,
        cursor: int | None,
        close_after: float | None = None,
        *,
        release: Callable[[], None],
    ) -> None:
        super().__init__(media_type=self.media_type)  # headers and body are sent by __call__, as they come
        self.join = join
        self.settings = settings
        self.stats = stats
        self.cursor = cursor
        self.close_after = close_after
        self.release = release  # gives back the stream's place under the caps
        self._outbox = _Outbox(settings.queue_bound)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            async with self.join() as hub:
                await self._serve(hub, receive, send)
        finally:
            self.release()

    async def _serve(self, hub: EventHub, receive: Receive, send: Send) -> None:
        headers = [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        sender = asyncio.create_task(self._send(send))
        gone = asyncio.create_task(_disconnected(receive))
        self.stats.open += 1
        try:
            if await self._produce(hub, sender, gone):
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

    async def _produce(self, hub: EventHub, sender: asyncio.Task[None], gone: asyncio.Task[None]) -> bool:
        """Queue frames until the client leaves or `close_after` passes (True), or it falls behind (False)."""
        loop = asyncio.get_running_loop()
        settings = self.settings
        deadline = None if self.close_after is None else loop.time() + self.close_after
        cursor = hub.head if self.cursor is None else self.cursor
        quiet_since = loop.time()

        def ended() -> bool:
            return sender.done() or gone.done() or (deadline is not None and loop.time() >= deadline)

        while not ended():
            news = hub.news  # taken before the copy: whatever the reader adds meanwhile sets it
            frames, cursor = await hub.after(cursor)
            if not frames and loop.time() - quiet_since >= settings.keepalive:
                frames = [KEEPALIVE_FRAME]
            if frames:
                if not await self._outbox.put(frames, settings.stall):
                    return False
                self.stats.most_queued = max(self.stats.most_queued, self._outbox.most)
                quiet_since = loop.time()
            if cursor < hub.head or ended():
                continue  # more to copy (or read below the ring) before waiting
            timeout = settings.keepalive - (loop.time() - quiet_since)
            if deadline is not None:
                timeout = min(timeout, deadline - loop.time())
            await _first(news.wait(), sender, gone, within=max(0.0, timeout))
        return True

    async def _send(self, send: Send) -> None:
        """Write what is queued, joined into one write (a burst costs the loop one send per client)."""
        while (body := await self._outbox.take()) is not None:
            await send({"type": "http.response.body", "body": body, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _finish(self, sender: asyncio.Task[None]) -> None:
        """End the body cleanly if the client still reads; never wait on a stalled one past a keep-alive."""
        self._outbox.close()
        if sender.done():
            return
        with contextlib.suppress(TimeoutError, asyncio.CancelledError, OSError):
            await asyncio.wait_for(asyncio.shield(sender), self.settings.keepalive)


class _Outbox:
    """The frames queued for one client, at most `bound`: put a batch at once, take all as one write.

    One call per batch, not one per frame: the fan-out of a burst to every stream costs
    the event loop a few C-level list operations per client.
    """

    def __init__(self, bound: int) -> None:
        self.bound = bound
        self.most = 0  # the most frames it has held
        self._frames: deque[bytes] = deque()
        self._closed = False
        self._ready = asyncio.Event()
        self._room = asyncio.Event()

    async def put(self, frames: list[bytes], stall: float) -> bool:
        """Queue `frames`, waiting up to `stall` seconds whenever it is full; False: the client is too slow."""
        start = 0
        while start < len(frames):
            room = self.bound - len(self._frames)
            if room <= 0:
                self._room.clear()
                try:
                    await asyncio.wait_for(self._room.wait(), stall)
                except TimeoutError:
                    return False
                continue
            self._frames.extend(frames[start : start + room])
            start += room
            self.most = max(self.most, len(self._frames))
            self._ready.set()
        return True

    def close(self) -> None:
        """No more frames: `take` returns None once the queued ones are taken."""
        self._closed = True
        self._ready.set()

    async def take(self) -> bytes | None:
        while not self._frames:
            if self._closed:
                return None
            self._ready.clear()
            await self._ready.wait()
        body = b"".join(self._frames)
        self._frames.clear()
        self._room.set()
        return body


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
