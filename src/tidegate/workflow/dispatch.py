"""Whether a run still starts steps: a step failing for good stops it before its slots are freed.

Recording a step's failure frees the slots it holds (its map's window slot,
its pools, its executor slot), and only then does the failure reach the run,
which cancels the rest. Were the run still dispatching meanwhile, a freed
slot would go at once to the map's next item (`Store.next_map_item` takes it
and marks it running) or to the next step waiting for it, which would start
work the failed run throws away. So a step whose failure fails the run calls
`stop` before its failure is recorded: no map takes another item, no step
starts its function, no finishing step hands its slots on; and `stop` waits
for the takes already on their way, which could otherwise be answered with
the very slot the failure is about to free. `cancel_all` then stops the
steps already started.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

T = TypeVar("T")


class Dispatch:
    """One attempt of a run: whether it still starts steps, and the map takes on their way."""

    def __init__(self) -> None:
        self._stopped = False
        self._takes: set[asyncio.Future[Any]] = set()

    @property
    def stopped(self) -> bool:
        return self._stopped

    async def take(self, take: Callable[[], Awaitable[T]]) -> T | None:
        """A map's next item, taken by `take`; None once stopped (nothing is taken then)."""
        if self._stopped:
            return None
        taking = asyncio.ensure_future(take())
        self._takes.add(taking)
        taking.add_done_callback(self._takes.discard)
        return await taking

    async def proceed(self) -> None:
        """Return at once while the run dispatches; once stopped, wait to be cancelled with the
        rest of the run (the failure that stopped it is on its way to the run)."""
        if self._stopped:
            await asyncio.get_running_loop().create_future()

    async def stop(self) -> None:
        """A step failed for good: start nothing more, and wait until the takes on their way have
        their answers (the window slot the failure frees can then go to none of them)."""
        self._stopped = True
        if self._takes:
            await asyncio.wait(self._takes)


async def cancel_all(tasks: Mapping[asyncio.Task[Any], Any]) -> None:
    """Cancel the tasks still running and wait until they have stopped (their results are dropped).

    Canceled while waiting (a run stopping gracefully whose grace ran out), it cancels them again,
    which stops the steps still finishing, and waits no longer."""
    for task in tasks:
        task.cancel()
    if not tasks:
        return
    try:
        await asyncio.wait(tasks)
    except asyncio.CancelledError:
        for task in tasks:
            task.cancel()
        raise
