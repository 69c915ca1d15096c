"""The parameters of `page_runs`, shared by both dialects: one place decides how a filter is sent.

Each dialect's `page_runs` runs its own `page_runs` query with these and maps
the rows with `records.run_record`; only how a query is executed differs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tidegate.domain.jsonvalue import dumps
from tidegate.domain.model import RunStatus


def page_params(
    status: RunStatus | None,
    queue: str | None,
    task: str | None,
    tags: Mapping[str, str] | None,
    before: str | None,
    limit: int,
) -> dict[str, Any]:
    """Unset filters go as NULL (the query skips them); tags as one JSON object every run must carry."""
    return {
        "status": status.value if status else None,
        "queue": queue,
        "task": task,
        "tags": dumps(dict(tags or {})),
        "before": before,
        "limit": limit,
    }
