"""SQLite retention: one batch of finished runs past the retention, deleted with what is theirs.

One `BEGIN IMMEDIATE` transaction per batch: the runs are chosen and deleted under the
single writer, so a run cannot be retried between the choice and the delete, and the
batch bound keeps the write lock short.
"""

from __future__ import annotations

import json

from tidegate.domain.retention import PruneReport
from tidegate.storage import port
from tidegate.storage.sqlite.database import Aggregate


class Retention(Aggregate, port.RetentionVerbs):
    """The retention verb of the storage port."""

    def prune_runs(self, older_than: float, limit: int) -> PruneReport:
        with self._write() as (connection, now):
            cutoff = now - older_than
            ids = [row[0] for row in connection.execute(self._q("prune_runs"), {"cutoff": cutoff, "limit": limit})]
            params = {"ids": json.dumps(ids)}
            events = connection.execute(self._q("prune_runs_events"), params).rowcount if ids else 0
            if ids:
                connection.execute(self._q("prune_runs_links"), params)
            steps = connection.execute(self._q("prune_runs_steps"), params).rowcount if ids else 0
            runs = connection.execute(self._q("prune_runs_delete"), params).rowcount if ids else 0
            ticks = connection.execute(self._q("prune_runs_ticks"), {"cutoff": cutoff, "limit": limit}).rowcount
        return PruneReport(runs=runs, events=events, steps=steps, ticks=ticks)
