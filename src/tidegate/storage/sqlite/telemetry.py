"""SQLite: the reads behind telemetry (the event stream, the fleet-wide gauges of `/metrics`).

Its own aggregate: these reads run on every scrape and every stream wake-up,
so they stay cheap range scans and grow apart from the verbs workers use.
"""

from __future__ import annotations

from tidegate.domain.blocking import QueuedShape
from tidegate.domain.model import EventRecord, RunStatus
from tidegate.storage import port
from tidegate.storage.shared import records
from tidegate.storage.sqlite.database import Aggregate
from tidegate.storage.sqlite.payloads import to_json, to_time


class Telemetry(Aggregate, port.TelemetryVerbs):
    """The telemetry reads of the storage port."""

    def events_after(self, after: int, limit: int) -> list[EventRecord]:
        rows = self._connection().execute(self._q("events_after"), {"after": after, "limit": limit})
        return [records.event_record(row, to_time, to_json) for row in rows]

    def latest_events(self, kind: str, limit: int) -> list[EventRecord]:
        rows = self._connection().execute(self._q("latest_events"), {"type": kind, "limit": limit})
        return [records.event_record(row, to_time, to_json) for row in rows]

    def last_event_id(self) -> int:
        (last,) = self._connection().execute(self._q("last_event_id")).fetchone()
        return int(last)

    def queued_shapes(self) -> list[QueuedShape]:
        rows = self._connection().execute(self._q("queued_shapes"))
        return [
            QueuedShape(queue, partition, to_json(tags) or {}, runs, rate)
            for queue, partition, tags, rate, runs in rows
        ]

    def run_counts(self) -> dict[tuple[str, RunStatus], int]:
        rows = self._connection().execute(self._q("run_counts"))
        return {(queue, RunStatus(status)): count for queue, status, count in rows}
