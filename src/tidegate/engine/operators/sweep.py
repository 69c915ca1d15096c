"""A sweep an operator asks for (`tidegate sweep`, `POST /api/v1/sweep`): recover stuck runs without a worker.

Workers sweep one at a time, each under the sweeper's lease; with none running (the only one was killed), a run
past its lease would hold its slots until one starts again. This runs the
same sweep a worker runs (`Store.sweep`: re-queue or fail runs whose lease
expired or whose worker is gone, free leaked and expired slots, fail runs past
their dispatch deadline), once, in the store's clock.
"""

from __future__ import annotations

import os
import socket

from tidegate.domain.model import SweepReport
from tidegate.storage.port import Store

LEASE_SECONDS = 1.0  # the sweeper's lease an operator's sweep takes: short, so a worker's sweeper follows soon


def sweep_now(store: Store, source: str) -> SweepReport | None:
    """Sweep once as `source` (`cli-sweep`, `api-sweep`) on this host; None if a worker's sweeper holds the lease."""
    return store.sweep(f"{source}:{socket.gethostname()}:{os.getpid()}", LEASE_SECONDS)
