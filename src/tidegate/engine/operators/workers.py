"""Workers as operators see them: the registry, live ones first, with their busy counts and heartbeats.

`tidegate workers`, `GET /api/v1/workers`, the dashboard's workers page and its overview read
it here; whether a running run's worker has lost its heartbeat is `engine.operators.runs`.
"""

from __future__ import annotations

from tidegate.domain.model import WorkerRecord
from tidegate.storage.port import Store


def list_workers(store: Store) -> list[WorkerRecord]:
    """Every registered worker (live ones first, by rank) with its busy count and heartbeat age."""
    return store.list_workers()
