"""SQLite rows: stored times and JSON as records, event rows (of runs and of steps), claimed runs.

Shared by the adapter's modules, so that values are converted one way everywhere.
"""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime
from typing import Any

from tidegate.domain.events import Event
from tidegate.domain.jsonvalue import dumps
from tidegate.domain.model import ClaimedRun


def to_time(value: float | None) -> datetime | None:
    return None if value is None else datetime.fromtimestamp(value, UTC)


def to_json(value: str | None) -> Any:
    return None if value is None else json.loads(value)


def event_row(run_id: str | None, event: Event, now: float, step_key: str | None = None) -> dict[str, Any]:
    """The parameters of `insert_event` for one event (built by domain/events.py)."""
    return {"run_id": run_id, "step_key": step_key, "type": event.type, "metadata": dumps(event.metadata), "now": now}


def claimed_run(row: sqlite3.Row, lead: float | None = None) -> ClaimedRun:
    """A claimed run; `lead`: taken ahead under a rate, the seconds it must start within
    (`Admission.leads`)."""
    return ClaimedRun(
        id=row["id"],
        task=row["task"],
        queue=row["queue"],
        args=json.loads(row["args"]),
        attempt=row["attempt"],
        max_attempts=row["max_attempts"],
        retry_backoff=row["retry_backoff"],
        timeout=row["timeout"],
        suspect=bool(row["suspect"]),
        queued_seconds=row["queued_seconds"],
        has_parent=bool(row["has_parent"]),
        trace_context=row["trace_context"],
        snoozes=row["snoozes"],
        lead=lead,
    )
