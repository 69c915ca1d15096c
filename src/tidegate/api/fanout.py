"""One reader of the store's events for every stream of a server, and a ring the streams copy from.

Each stream reading the store on each wake-up made a batch of submits cost one
read per open stream: a few hundred idle dashboards stalled ordinary requests
for seconds. Here one task per event loop (one per server process under
uvicorn) waits for the store's wake-ups, reads the events after the highest id
it has handed out (one read per wake-up, however many stream), frames each
event once, and keeps the last `ring` frames. A stream copies the frames after
its own cursor from the ring into its bounded queue (references, not copies).
A stream whose cursor is older than the ring holds (a client resuming from an
old Last-Event-ID, or one that fell a whole ring behind) reads that part
itself, a batch at a time, at most `catchup_reads` such reads at once.

The reader holds events back across a gap in ids (`gaps.InOrder`), so a
stream never sees an id the ring passed over; a catch-up read hands out what
lies below the ring's floor without waiting, as the reader already waited.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass

from tidegate.api.gaps import InOrder
from tidegate.api.wakeups import Wakeups
from tidegate.bootstrap import Store
from tidegate.domain.model import EventRecord
from tidegate.engine.operators.events import events_after, last_event_id

log = logging.getLogger("tidegate.api")


@dataclass
class StreamStats:
    """What the streams of one API did, for operators and tests: nothing here grows with traffic."""

    open: int = 0
    dropped: int = 0
    refused: int = 0  # streams refused by a cap
    most_queued: int = 0  # the deepest any client's queue has been
    reads: int = 0  # the shared readers' store reads of events
    catchup_reads: int = 0  # the streams' own reads, of events older than the ring holds


class EventHub:
    """The shared reader of one event loop, its ring of frames, and the news it gives its streams."""

    def __init__(
        self,
        store: Callable[[], Store],
        wakeups: Wakeups,
        stats: StreamStats,
        *,
        ring: int,
        read_batch: int,
        debounce: float,
        backstop: float,
        gap_patience: float,
        catchup_reads: int,
    ) -> None:
        self._store = store
        self._wakeups = wakeups
        self._stats = stats
        self._ring = ring
        self._read_batch = read_batch
        self._debounce = debounce
        self._backstop = backstop
        self._patience = gap_patience
        self._catchups = asyncio.Semaphore(catchup_reads)
        self._ids: list[int] = []  # ascending; `_frames[i]` is the frame of event `_ids[i]`
        self._frames: list[bytes] = []
        self.floor = 0  # the ring holds every event handed out with an id in (floor, head]
        self.head = 0
        self.news = asyncio.Event()  # set (and replaced) whenever the ring grows
        self.streams = 0  # the streams using this hub (its owner stops it at 0)
        self._started: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._task = asyncio.create_task(self._run(), name="tidegate-event-reader")

    async def started(self) -> None:
        """Once the reader knows where the store's events end (it raises if the store cannot be read)."""
        await asyncio.shield(self._started)

    async def stop(self) -> None:
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)  # its failure, if any, was its streams' to see

    async def after(self, cursor: int) -> tuple[list[bytes], int]:
        """The frames of the events after `cursor`, and the cursor past them (it never moves back)."""
        if cursor >= self.floor:
            start = bisect.bisect_right(self._ids, cursor)
            return self._frames[start:], max(cursor, self.head)
        async with self._catchups:
            events = await asyncio.to_thread(events_after, self._store(), cursor, self._read_batch)
        self._stats.catchup_reads += 1
        floor = self.floor  # the ring may have moved on during the read: it serves what lies above
        below = [event for event in events if event.id <= floor]
        if len(events) == self._read_batch and len(below) == len(events):
            return [frame(event) for event in below], below[-1].id  # more below the ring: read again
        return [frame(event) for event in below], floor

    async def _run(self) -> None:
        woken = await self._wakeups.subscribe()
        try:
            try:
                order = InOrder(await asyncio.to_thread(last_event_id, self._store()), self._patience)
            except asyncio.CancelledError:
                self._started.cancel()
                raise
            except Exception as error:  # the streams waiting to start get it; the next stream starts anew
                self._started.set_exception(error)
                raise
            self.floor = self.head = order.cursor
            self._started.set_result(None)
            await self._follow(order, woken)
        finally:
            await self._wakeups.unsubscribe(woken)

    async def _follow(self, order: InOrder, woken: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        more = False
        while True:
            if not more:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(woken.wait(), self._patience if order.waiting else self._backstop)
                if woken.is_set():
                    await asyncio.sleep(self._debounce)  # let a burst of wake-ups settle into one read
                    woken.clear()
            try:
                events = await asyncio.to_thread(events_after, self._store(), order.cursor, self._read_batch)
            except Exception:  # the store is down: its streams stay open and wait, as a worker would
                log.warning("event streams: reading the store's events failed; retrying", exc_info=True)
                more = False
                continue
            self._stats.reads += 1
            ready = order.take(events, loop.time())
            if ready:
                self._keep(ready)
            more = len(events) == self._read_batch and len(ready) == len(events)
            if more:
                await asyncio.sleep(0)  # let the streams copy this batch before the next is read

    def _keep(self, events: list[EventRecord]) -> None:
        self._ids.extend(event.id for event in events)
        self._frames.extend(frame(event) for event in events)
        self.head = self._ids[-1]
        excess = len(self._ids) - self._ring
        if excess > 0:
            self.floor = self._ids[excess - 1]
            del self._ids[:excess], self._frames[:excess]
        news, self.news = self.news, asyncio.Event()
        news.set()


def frame(event: EventRecord) -> bytes:
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
