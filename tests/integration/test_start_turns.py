"""A turn that reports only starts looks before it claims (issue 16, W2's idle slots).

After a claim, the runs it took start and their starts go to the store in a turn of their own.
A wake-up usually lands before that turn (on PostgreSQL the NOTIFY of the worker's own claim),
and a woken turn claims for its free slots: under a full global cap, a limited claim that takes
the claim turn and locks window rows to find nothing, once per batch of runs in W2. Now such a
turn first makes the cheap look (`peek_cycle`), and when it answers "closed" the starts go alone,
claiming nothing. Both adapters.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from tests.conftest import wait_until
from tests.races import TIMEOUT
from tidegate import Concurrency, RunStatus


def test_a_woken_turn_with_only_starts_under_a_full_cap_claims_nothing(app: Any) -> None:
    app.queue("gate", concurrency=Concurrency(global_limit=1))
    started, release, woken_after_start = threading.Event(), threading.Event(), threading.Event()

    @app.task(queue="gate", name="gate.hold")
    def hold() -> None:
        started.set()
        release.wait(3 * TIMEOUT)  # longer than any wait of the test: only the test ends it

    cycles: list[tuple[int, int, int]] = []  # (starts, outcomes, claim limit) of every cycle
    real_cycle = app.store.cycle

    def recorded(worker_id: str, queues: Any, starts: Any, outcomes: Any, claim_limit: int, lease: float) -> Any:
        cycles.append((len(starts), len(outcomes), claim_limit))
        return real_cycle(worker_id, queues, starts, outcomes, claim_limit, lease)

    app.store.cycle = recorded
    worker = app.worker(queues=["gate"], max_workers=2, poll_interval=3600)
    real_wake, real_done = worker._bridge.wake, worker._done

    def wake() -> None:  # on the worker's loop
        real_wake()
        if started.is_set():
            woken_after_start.set()

    async def done_once_woken() -> bool:
        """The run started (its start is buffered) and a wake-up from outside reached the loop:
        the next turn reports the start, woken."""
        if worker.in_flight and not release.is_set():
            running = asyncio.get_running_loop()
            await running.run_in_executor(None, started.wait, TIMEOUT)
            hold.submit()  # a commit that wakes every worker, this one included
            await running.run_in_executor(None, woken_after_start.wait, TIMEOUT)
        return await real_done()

    worker._bridge.wake, worker._done = wake, done_once_woken
    worker.start()
    try:
        first, second = hold.submit_many([{}, {}])  # the cap lets one in: a claim of 2 that comes back short
        assert started.wait(TIMEOUT)
        wait_until(lambda: any(s and not o for s, o, _ in cycles), TIMEOUT, message="the start reported alone")
        assert next(limit for s, o, limit in cycles if s and not o) == 0, cycles
        release.set()
        for handle in (first, second):
            handle.wait(TIMEOUT)
        assert first.status() is second.status() is RunStatus.COMPLETED
    finally:
        release.set()
        worker.stop(timeout=30, grace=0)
