"""PostgreSQL's answers to `tidegate doctor`: its clocks, its connection limits, what the retention left.

The server's own clock is read without the injected clock's offset, so the doctor
compares it with this host's; the store's time (`tidegate_now()`) is what leases
and schedules are compared with.
"""

from __future__ import annotations

from tidegate.domain.doctor import DatabaseFacts
from tidegate.storage import port
from tidegate.storage.postgres.connections import ConnectionBound
from tidegate.storage.postgres.database import Aggregate, Database


class Health(Aggregate, port.HealthVerbs):
    """The doctor's verb of the storage port."""

    def __init__(self, db: Database, per_process: ConnectionBound) -> None:
        super().__init__(db)
        self._per_process = per_process  # what a worker process on this store's settings may open

    def doctor_facts(self, retention: float) -> DatabaseFacts:
        row = self._fetchone("doctor_facts", {"retention": retention})
        assert row is not None  # an aggregate: always one row
        now, server_now, max_connections, reserved, open_now, count, oldest = row
        return DatabaseFacts(
            "postgresql",
            now,
            server_now,
            count,
            oldest,
            max_connections,
            reserved,
            open_now,
            self._per_process.total,
            self._per_process.parts(),
        )
