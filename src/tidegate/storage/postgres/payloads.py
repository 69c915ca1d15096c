"""PostgreSQL rows: batches as JSON documents for the SQL, and the rows read back as records.

Shared by the adapter's modules (steps included), so that times, JSON and
batch payloads are converted one way everywhere.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import psycopg

from tidegate.domain.admission import LocalUsage
from tidegate.domain.events import Event, attempt_ended
from tidegate.domain.jsonvalue import dumps
from tidegate.domain.model import ClaimedRun, NewRun, Outcome, OutcomeKind
from tidegate.domain.scopes import Rules
from tidegate.domain.transitions import outcome_status
from tidegate.storage.port import Fence
from tidegate.storage.shared import records

_JSON_NUL = "\\u0000"  # how json.dumps writes U+0000, which jsonb and text refuse


def to_time(value: datetime | None) -> datetime | None:
    """In UTC, like the SQLite adapter, whatever the session's TimeZone."""
    return None if value is None else value.astimezone(UTC)


def to_json(value: Any) -> Any:
    return value  # already decoded by the connection's jsonb loader (_sorted_loads)


def event_params(run_id: str | None, event: Event, step_key: str | None = None) -> dict[str, Any]:
    """The parameters of `insert_event` for one event (built by domain/events.py)."""
    return {"run_id": run_id, "step_key": step_key, "type": event.type, "metadata": dumps(event.metadata)}


def payload_json(rows: list[dict[str, Any]]) -> str:
    """A batch as one JSON document for jsonb_to_recordset (order kept in `n`)."""
    return dumps(rows)


def fence_arrays(fences: Sequence[Fence]) -> dict[str, list[Any]]:
    return {"ids": [run_id for run_id, _ in fences], "attempts": [attempt for _, attempt in fences]}


def start_arrays(starts: Sequence[Fence]) -> dict[str, list[Any]]:
    unique = list(dict.fromkeys((run_id, attempt) for run_id, attempt in starts))
    arrays = fence_arrays(unique)
    return {"start_ids": arrays["ids"], "start_attempts": arrays["attempts"]}


def enqueue_payload(runs: Sequence[NewRun]) -> str:
    """Args, tags and keys hold no NUL: submit refuses them on both adapters (domain/jsonvalue.py)."""
    return payload_json([{"n": index, **records.new_run_row(run)} for index, run in enumerate(runs)])


def outcome_payload(outcomes: Sequence[Outcome]) -> tuple[list[Fence], str]:
    """The fences reported (once each) and the rows to apply, as one JSON document."""
    if not outcomes:
        return [], "[]"
    rows = _outcome_rows(outcomes)
    text = payload_json(list(rows.values()))
    if _JSON_NUL in text:
        rows = _outcome_rows([_storable(outcome) for outcome in outcomes])
        text = payload_json(list(rows.values()))
    return list(rows), text


def _outcome_rows(outcomes: Sequence[Outcome]) -> dict[Fence, dict[str, Any]]:
    """One row per fence (the last report wins, as on SQLite), with its event precomputed."""
    rows: dict[Fence, dict[str, Any]] = {}
    for outcome in outcomes:
        status = outcome_status(outcome.kind.value, outcome.retry_delay)
        snoozed = outcome.kind is OutcomeKind.SNOOZED
        ended = attempt_ended(status, outcome.attempt, outcome.error, outcome.retry_delay, snoozed, outcome.overloaded)
        rows[(outcome.run_id, outcome.attempt)] = {
            "id": outcome.run_id,
            "attempt": outcome.attempt,
            "status": status,
            "result": outcome.result,
            "error": outcome.error,
            "delay": outcome.retry_delay,
            # As applied unless a cancel was requested: then cycle_reports ends it canceled
            # (settle) and makes the event attempt_ended's for that status.
            "event": ended.type,
            "metadata": ended.metadata,
            "snooze": snoozed,
        }
    for index, row in enumerate(rows.values()):
        row["n"] = index
    return rows


def _storable(outcome: Outcome) -> Outcome:
    """PostgreSQL refuses U+0000 in text; without this one error message would sink the whole cycle.

    (A result never holds it: the worker refuses such a result on both adapters, domain/jsonvalue.py.)
    """
    if outcome.error is None or "\x00" not in outcome.error:
        return outcome
    error = outcome.error.replace("\x00", "\\x00")
    return replace(outcome, error=error)


def claimed_run(row: tuple[Any, ...], lead: float | None = None) -> ClaimedRun:
    """A claimed run; `lead`: taken ahead under a rate, the seconds it must start within
    (`Admission.leads`)."""
    (
        run_id,
        task,
        queue,
        args,
        attempt,
        max_attempts,
        retry_backoff,
        timeout,
        suspect,
        queued_seconds,
        has_parent,
        trace_context,
        snoozes,
    ) = row
    return ClaimedRun(
        id=run_id,
        task=task,
        queue=queue,
        args=args,
        attempt=attempt,
        max_attempts=max_attempts,
        retry_backoff=retry_backoff,
        timeout=timeout,
        suspect=suspect,
        queued_seconds=queued_seconds,
        has_parent=has_parent,
        trace_context=trace_context,
        snoozes=snoozes,
        lead=lead,
    )


# --- the claim's rows ---------------------------------------------------------------------------


def claim_order(row: Mapping[str, Any]) -> tuple[bool, int, datetime, str]:
    """The claim index's order (resumed first, priority desc, age, id), as the SQL reads it."""
    return (not row["resumed"], -row["priority"], row["scheduled_at"], row["id"])


def excluded_json(excluded: Sequence[tuple[str, str]]) -> str:
    """Full tags as a JSON list of one-pair objects, for `tags @> tag` in SQL."""
    return dumps([{key: value} for key, value in excluded])


def uses_tags(rules: Rules) -> bool:
    """Whether any tag limit or tag rate exists, so that a run's tags may decide a scope."""
    run_queue = rules.run_queue
    return bool(run_queue.tag_concurrency_limits or run_queue.tag_rate_limits) or any(
        target.startswith("tag:") for target in rules.overrides
    )


def local_usage(cursor: psycopg.Cursor[Any]) -> LocalUsage:
    """What this worker runs, per queue and per (queue, partition), and its group of suspects."""
    local = LocalUsage()
    for queue, partition, count, group in cursor.fetchall():
        local.per_queue[queue] = local.per_queue.get(queue, 0) + count
        local.per_partition[(queue, partition)] = count
        local.suspect_group = local.suspect_group or group
    return local


def lane_load(cursor: psycopg.Cursor[Any]) -> dict[tuple[str, str], int]:
    return {(queue, partition): count for queue, partition, count in cursor.fetchall()}
