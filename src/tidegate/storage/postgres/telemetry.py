"""PostgreSQL: the reads behind telemetry (the event stream, the fleet-wide gauges of `/metrics`).

Its own aggregate: these reads run on every scrape and every stream wake-up,
so they stay cheap range scans and grow apart from the verbs workers use.
"""

from __future__ import annotations

from tidegate.domain.blocking import QueuedShape
from tidegate.domain.model import EventRecord, RunStatus
from tidegate.storage import port
from tidegate.storage.shared import records
from tidegate.storage.postgres.database import Aggregate
from tidegate.storage.postgres.payloads import to_json, to_time


class Telemetry(Aggregate, port.TelemetryVerbs):
    """The telemetry reads of the storage port."""

    def events_after(self, after: int, limit: int) -> list[EventRecord]:
        rows = self._fetch_dicts("events_after", {"after": after, "limit": limit})
        return [records.event_record(row, to_time, to_json) for row in rows]

    def latest_events(self, kind: str, limit: int) -> list[EventRecord]:
        rows = self._fetch_dicts("latest_events", {"type": kind, "limit": limit})
        return [records.event_record(row, to_time, to_json) for row in rows]

    def last_event_id(self) -> int:
        row = self._fetchone("last_event_id")
        return int(row[0]) if row else 0  # coalesce(max(id), 0) always returns its one row

    def queued_shapes(self) -> list[QueuedShape]:
        with self._connection() as connection:
            rows = connection.execute(self._q("queued_shapes")).fetchall()
        return [QueuedShape(queue, partition, tags or {}, runs, rate) for queue, partition, tags, rate, runs in rows]

    def run_counts(self) -> dict[tuple[str, RunStatus], int]:
        with self._connection() as connection:
            rows = connection.execute(self._q("run_counts")).fetchall()
        return {(queue, RunStatus(status)): count for queue, status, count in rows}
