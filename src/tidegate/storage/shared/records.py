"""Turning rows into domain records, shared by both adapters.

The adapters differ only in how a row holds times (epoch seconds on SQLite,
timestamptz on PostgreSQL) and JSON (text or already decoded), so they pass
those two conversions in and the mapping itself exists once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from tidegate.domain.keys import CheckedUnique
from tidegate.domain.model import (
    EventRecord,
    HolderRecord,
    NewRun,
    RunRecord,
    RunStatus,
    TaskDefinition,
    TaskRegistration,
    WorkerRecord,
)
from tidegate.domain.parameters import TaskParameters
from tidegate.domain.rate_costs import stored_declaration
from tidegate.domain.steps import StepRecord, StepStatus

ToTime = Callable[[Any], datetime | None]
ToJSON = Callable[[Any], Any]


def run_record(row: Mapping[str, Any], to_time: ToTime, to_json: ToJSON) -> RunRecord:
    return RunRecord(
        id=row["id"],
        task=row["task"],
        queue=row["queue"],
        partition=row["partition_key"],
        status=RunStatus(row["status"]),
        priority=row["priority"],
        args=to_json(row["args"]),
        tags=to_json(row["tags"]) or {},
        concurrency_key=row["concurrency_key"],
        attempt=row["attempt"],
        max_attempts=row["max_attempts"],
        # to_time is typed Optional; these columns are NOT NULL
        submitted_at=to_time(row["submitted_at"]),  # type: ignore[arg-type]
        scheduled_at=to_time(row["scheduled_at"]),  # type: ignore[arg-type]
        started_at=to_time(row["started_at"]),
        finished_at=to_time(row["finished_at"]),
        worker_id=row["worker_id"],
        lease_expires_at=to_time(row["lease_expires_at"]),
        cancel_requested=bool(row["cancel_requested"]),
        result=to_json(row["result"]),
        error=row["error"],
        block_reason=to_json(row["block_reason"]),
        suspect=bool(row["suspect"]),
        resumed=bool(_optional(row, "resumed")),
        parent_id=_optional(row, "parent_id"),
        root_id=_optional(row, "root_id"),
        depth=_optional(row, "depth") or 0,
        wait_released=to_json(_optional(row, "wait_released")),
        wait_kept=to_json(_optional(row, "wait_kept")),
        wait_any=_optional(row, "wait_remaining") is not None,  # NULL: a wait on all of them
        child_waits=row["child_waits"],
        worker_shutdowns=row["worker_shutdowns"],
        lost_workers=row["lost_workers"],
        manual_retries=row["manual_retries"],
        rate_partition=row["rate_key"],
        snoozes=row["snoozes"],
    )


def _optional(row: Mapping[str, Any], key: str) -> Any:
    """A column only some reads select (a run's links and wait, read by `get_run`)."""
    try:
        return row[key]
    except (KeyError, IndexError):
        return None


def holder_record(row: Mapping[str, Any], to_time: ToTime) -> HolderRecord:
    return HolderRecord(
        scope=row["scope"],
        holder=row["holder"],
        run_id=row["run_id"],
        attempt=row["attempt"],
        worker_id=row["worker_id"],
        slots=row["slots"],
        # to_time is typed Optional; these columns are NOT NULL
        claimed_at=to_time(row["claimed_at"]),  # type: ignore[arg-type]
        expires_at=to_time(row["expires_at"]),  # type: ignore[arg-type]
    )


def worker_record(row: Mapping[str, Any], to_time: ToTime, to_json: ToJSON) -> WorkerRecord:
    return WorkerRecord(
        id=row["id"],
        rank=row["rank"],
        capacity=row["capacity"],
        busy=row["busy"],
        queues=sorted(to_json(row["queues"])),
        fill_order=bool(row["fill_order"]),
        started_at=to_time(row["started_at"]),  # type: ignore[arg-type]
        heartbeat_at=to_time(row["heartbeat_at"]),  # type: ignore[arg-type]
        heartbeat_age=max(0.0, float(row["heartbeat_age"])),
        live=bool(row["live"]),
        lease_seconds=float(row["lease_seconds"]),
    )


def event_record(row: Mapping[str, Any], to_time: ToTime, to_json: ToJSON) -> EventRecord:
    return EventRecord(
        id=row["id"],
        run_id=row["run_id"],
        step_key=row["step_key"],
        type=row["type"],
        metadata=to_json(row["metadata"]) or {},
        # to_time is typed Optional; this column is NOT NULL
        at=to_time(row["at"]),  # type: ignore[arg-type]
    )


def step_record(row: Mapping[str, Any], to_time: ToTime, to_json: ToJSON) -> StepRecord:
    return StepRecord(
        run_id=row["run_id"],
        step_key=row["step_key"],
        map_key=row["map_key"],
        item_index=row["item_index"],
        status=StepStatus(row["status"]),
        output=to_json(row["output"]),
        error=row["error"],
        attempt=row["attempt"],
        started_at=to_time(row["started_at"]),
        finished_at=to_time(row["finished_at"]),
        waiting_for=to_json(row["waiting_for"]),
    )


def task_definition(row: Mapping[str, Any], to_json: ToJSON) -> TaskDefinition:
    return TaskDefinition(
        name=row["name"],
        queue=row["queue"],
        priority=row["priority"],
        tags=to_json(row["tags"]) or {},
        max_attempts=row["max_attempts"],
        retry_backoff=row["retry_backoff"],
        timeout=row["timeout"],
        dispatch_deadline=row["dispatch_deadline"],
        parameters=TaskParameters.from_json(to_json(row["parameters"])),
        unique=CheckedUnique.from_json(to_json(row["unique_rule"])),
        rate_cost=row["rate_cost"],
    )


def task_registration(row: Mapping[str, Any], to_time: ToTime, to_json: ToJSON) -> TaskRegistration:
    updated_at = to_time(row["updated_at"])
    assert updated_at is not None  # NOT NULL
    return TaskRegistration(task_definition(row, to_json), updated_at, row["worker_id"], to_time(row["worker_seen_at"]))


def task_row(task: TaskDefinition, worker_id: str | None) -> dict[str, Any]:
    """A task definition as `register_tasks` stores it (its tags, parameters and unique rule still JSON values)."""
    return {
        "name": task.name,
        "queue": task.queue,
        "priority": task.priority,
        "tags": task.tags,
        "max_attempts": task.max_attempts,
        "retry_backoff": task.retry_backoff,
        "timeout": task.timeout,
        "dispatch_deadline": task.dispatch_deadline,
        "parameters": None if task.parameters is None else task.parameters.to_json(),
        "unique_rule": None if task.unique is None else task.unique.to_json(),
        "rate_cost": stored_declaration(task.rate_cost),
        "worker_id": worker_id,
    }


def new_run_row(run: NewRun) -> dict[str, Any]:
    """A submitted run as `enqueue` stores it (its args and tags still JSON values)."""
    return {
        "id": run.id,
        "task": run.task,
        "queue": run.queue,
        "partition_key": run.partition,
        "rate_key": run.rate_partition,
        "rate_cost": run.rate_cost,
        "priority": run.priority,
        "args": run.args,
        "tags": run.tags,
        "concurrency_key": run.concurrency_key,
        "max_attempts": run.max_attempts,
        "retry_backoff": run.retry_backoff,
        "timeout": run.timeout,
        "delay": run.delay,
        "deadline": run.deadline,
        "trace_context": run.trace_context,
    }
