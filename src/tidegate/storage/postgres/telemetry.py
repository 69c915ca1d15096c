"""PostgreSQL: the reads behind telemetry (the event stream, the fleet-wide gauges of `/metrics`).

Its own aggregate: these reads run on every scrape and every stream wake-up,
so they stay cheap range scans and grow apart from the verbs workers use. The reads
are written once (storage/shared/reads.py); the SQL is telemetry.sql.
"""

from __future__ import annotations

from tidegate.storage import port
from tidegate.storage.postgres.database import Aggregate
from tidegate.storage.shared.reads import TelemetryReads


class Telemetry(Aggregate, TelemetryReads, port.TelemetryVerbs):
    """The telemetry reads of the storage port."""
