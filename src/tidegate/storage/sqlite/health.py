"""SQLite's answers to `tidegate doctor`: the store's time and what the retention left behind.

SQLite has no clock and no connection limit of its own: every process stamps
with its host's clock, and readers never wait for a connection slot.
"""

from __future__ import annotations

from datetime import UTC, datetime

from tidegate.domain.doctor import DatabaseFacts
from tidegate.storage import port
from tidegate.storage.sqlite.database import Aggregate
from tidegate.storage.sqlite.payloads import to_time


class Health(Aggregate, port.HealthVerbs):
    """The doctor's verb of the storage port."""

    def doctor_facts(self, retention: float) -> DatabaseFacts:
        now = self._db.clock.wall()
        count, oldest = self._connection().execute(self._q("doctor_facts"), {"cutoff": now - retention}).fetchone()
        return DatabaseFacts("sqlite", datetime.fromtimestamp(now, UTC), None, count, to_time(oldest))
