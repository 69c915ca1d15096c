"""Claimers racing on their own store connections: each claims a queue a few times at once with the others.

A rate (a queue's, or a tag's across queues) must hold across claimers, not only
within one store: these tests open one raw store per claimer, start them together
and gather every run any of them claimed.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from tests.conftest import raw_store
from tidegate.domain.model import CycleRequest


def claimed_together(database_url: str, queues: Sequence[str], limit: int, rounds: int = 3) -> list[str]:
    """The runs claimed by one claimer per entry of `queues` (its queue), each on its own store,
    released together and claiming `rounds` times up to `limit` runs."""
    stores = [raw_store(database_url) for _ in queues]
    barrier = threading.Barrier(len(stores))
    claimed: list[str] = []

    def claim(store: object, queue: str, worker: str) -> None:
        barrier.wait()
        for _ in range(rounds):
            request = CycleRequest(worker, [queue], [], [], limit, 60)
            claimed.extend(run.id for run in store.cycle(request).claimed)  # type: ignore[attr-defined]

    threads = [
        threading.Thread(target=claim, args=(store, queue, f"w{n}"))
        for n, (store, queue) in enumerate(zip(stores, queues, strict=True))
    ]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        for store in stores:
            store.close()
    return claimed
