"""PostgreSQL: what the fleet is doing, for operators: the worker registry and how fast runs end.

Read-only, and its own aggregate: `GET /api/v1/workers` and the ETA of
`queue why` read it; the claim path never does. Ages and windows are
measured on the server's clock (`tidegate_now()`), never this process's.
"""

from __future__ import annotations

from collections.abc import Mapping

from tidegate.domain.jsonvalue import dumps
from tidegate.domain.model import WorkerRecord
from tidegate.storage import records
from tidegate.storage.postgres.database import Aggregate
from tidegate.storage.postgres.payloads import to_json, to_time


class Activity(Aggregate):
    """The fleet-reading verbs of the storage port."""

    def list_workers(self) -> list[WorkerRecord]:
        return [records.worker_record(row, to_time, to_json) for row in self._fetch_dicts("list_workers", {})]

    def finished_count(
        self,
        within: float,
        *,
        queue: str | None = None,
        partition: str | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> int:
        params = {"within": within, "queue": queue, "partition": partition, "tags": dumps(dict(tags or {}))}
        row = self._fetchone("finished_count", params)
        count: int = row[0] if row else 0  # count(*) always returns its one row
        return count
