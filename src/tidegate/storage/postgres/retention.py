"""PostgreSQL retention: one batch of finished runs past the retention, deleted with what is theirs.

One statement (data-modifying CTEs) per batch: the chosen run rows are locked `FOR UPDATE
SKIP LOCKED` and their status checked again, so a run being retried is never deleted, and
the batch bound keeps the locks few and short.
"""

from __future__ import annotations

from tidegate.domain.retention import PruneReport
from tidegate.storage import port
from tidegate.storage.postgres.database import Aggregate
from tidegate.storage.postgres.pipeline import transaction


class Retention(Aggregate, port.RetentionVerbs):
    """The retention verb of the storage port."""

    def prune_runs(self, older_than: float, limit: int) -> PruneReport:
        with self._connection() as connection:
            with transaction(connection):
                counts = connection.execute(self._q("prune_runs"), {"older_than": older_than, "limit": limit})
            row = counts.fetchone()
        assert row is not None  # the counts always come back as one row
        runs, events, steps, ticks = row
        return PruneReport(runs=runs, events=events, steps=steps, ticks=ticks)
