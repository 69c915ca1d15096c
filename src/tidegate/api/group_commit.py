"""Group commit: single submits that arrive together are stored in one transaction.

Eight clients posting one run each used to cost eight thread hops and eight
write transactions, which on SQLite queue behind one writer and on PostgreSQL
are a round trip each (benchmarks/results/http_submit.md has the profile).
Here each request waits on the event loop for its outcome; one flush at a time
takes everything pending (up to `MAX_GROUP`) to the thread pool and stores it
with one `store` call. While it runs, new requests gather for the next flush,
so a lone request goes at once and a burst shares the cost. Nothing is decided
here: `store` (api/submission.py: `store_each`) gives each item its own
outcome, exactly as if it had come alone.

Used from one event loop (the server's); it holds no lock.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from starlette.concurrency import run_in_threadpool

MAX_GROUP = 64  # items stored in one transaction: larger bursts take several flushes

Item = TypeVar("Item")
Outcome = TypeVar("Outcome")


class GroupCommit(Generic[Item, Outcome]):
    """`await group(item)`: its outcome from `store(items)`, which returns one outcome or exception per item."""

    def __init__(
        self, store: Callable[[Sequence[Item]], list[Outcome | Exception]], max_group: int = MAX_GROUP
    ) -> None:
        self._store = store
        self._max_group = max_group
        self._pending: list[tuple[Item, asyncio.Future[Outcome]]] = []
        self._flush: asyncio.Task[None] | None = None

    async def __call__(self, item: Item) -> Outcome:
        future: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()
        self._pending.append((item, future))
        if self._flush is None:
            self._flush = asyncio.create_task(self._flush_pending())
        return await future

    async def _flush_pending(self) -> None:
        try:
            while self._pending:
                group, self._pending = self._pending[: self._max_group], self._pending[self._max_group :]
                try:
                    outcomes = await run_in_threadpool(self._store, [item for item, _ in group])
                except Exception as error:  # a bug in `store`: every waiter learns of it, none hangs
                    outcomes = [error] * len(group)
                for (_, future), outcome in zip(group, outcomes, strict=True):
                    if future.done():  # its request was cancelled (the client went away)
                        continue
                    if isinstance(outcome, Exception):
                        future.set_exception(outcome)
                    else:
                        future.set_result(outcome)
        finally:
            self._flush = None
