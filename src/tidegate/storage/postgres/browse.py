"""PostgreSQL: paging through runs (the HTTP API's `GET /runs`), newest first, by keyset.

Its own aggregate so the reads an operator pages through grow apart from the
runs verbs the workers depend on.
"""

from __future__ import annotations

from collections.abc import Mapping

from tidegate.domain.model import RunRecord, RunStatus
from tidegate.storage import port
from tidegate.storage.shared import browsing, records
from tidegate.storage.postgres.database import Aggregate
from tidegate.storage.postgres.payloads import to_json, to_time


class Browse(Aggregate, port.BrowseVerbs):
    """The browsing verbs of the storage port."""

    def page_runs(
        self,
        *,
        status: RunStatus | None = None,
        queue: str | None = None,
        task: str | None = None,
        tags: Mapping[str, str] | None = None,
        before: str | None = None,
        limit: int = 100,
    ) -> list[RunRecord]:
        params = browsing.page_params(status, queue, task, tags, before, limit)
        rows = self._fetch_dicts("page_runs", params)
        return [records.run_record(row, to_time, to_json) for row in rows]
