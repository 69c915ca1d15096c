"""The plain reads of the port, written once for both dialects.

A plain read runs one named query and decodes its rows; the dialects differ
only in how a named query runs (SQLite: on the thread's connection; PostgreSQL:
on a pooled connection, with the cursor `named_cursor` picks) and how a time
and a JSON value come back (SQLite stores epoch seconds and JSON text;
PostgreSQL returns timestamps and decoded jsonb). Those are `Dialect`, which
each dialect's `Aggregate` implements; the SQL stays in each dialect's .sql
files, under the same names. Each mixin below is one role's reads: a dialect's
aggregate of that role inherits it beside its `Aggregate`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol

from tidegate.domain.blocking import QueuedShape
from tidegate.domain.model import (
    EventRecord,
    HolderRecord,
    LimitOverride,
    QueueCounts,
    RunRecord,
    RunStatus,
    TaskDefinition,
    TaskRegistration,
)
from tidegate.domain.schedules import ScheduleRecord
from tidegate.domain.steps import PoolStatus, PoolWaiter, StepRecord
from tidegate.storage.shared import browsing, pool_rows, records, scheduling


class Dialect(Protocol):
    """What a read written once needs of a dialect's aggregate."""

    def _rows(self, name: str, params: Mapping[str, Any] | None = None) -> Sequence[Any]:
        """The rows of the named query, each read by column name."""

    def _tuples(self, name: str, params: Mapping[str, Any] | None = None) -> Sequence[Any]:
        """The rows of the named query, each read by position."""

    def _to_time(self, value: Any) -> datetime | None:
        """A stored time, in UTC."""

    def _to_json(self, value: Any) -> Any:
        """A stored JSON value, decoded with object keys sorted."""


class RunReads:
    """Tasks, runs and their events, as `port.RunVerbs` reads them."""

    def get_task(self: Dialect, name: str) -> TaskDefinition | None:
        rows = self._rows("get_task", {"name": name})
        return records.task_definition(rows[0], self._to_json) if rows else None

    def list_tasks(self: Dialect) -> list[TaskRegistration]:
        return [records.task_registration(row, self._to_time, self._to_json) for row in self._rows("list_tasks")]

    def get_run(self: Dialect, run_id: str) -> RunRecord | None:
        rows = self._rows("get_run", {"id": run_id})
        return records.run_record(rows[0], self._to_time, self._to_json) if rows else None

    def run_events(self: Dialect, run_id: str) -> list[EventRecord]:
        rows = self._rows("run_events", {"run_id": run_id})
        return [records.event_record(row, self._to_time, self._to_json) for row in rows]

    def status_counts(self: Dialect, queue: str | None = None) -> dict[RunStatus, int]:
        counts = dict.fromkeys(RunStatus, 0)
        for status, count in self._tuples("status_counts", {"queue": queue}):
            counts[RunStatus(status)] = count
        return counts

    def list_queued(self: Dialect, queue: str | None = None, limit: int = 100) -> list[RunRecord]:
        rows = self._rows("list_queued", {"queue": queue, "limit": limit})
        return [records.run_record(row, self._to_time, self._to_json) for row in rows]


class BrowseReads:
    """`port.BrowseVerbs`: runs a page at a time, newest first, by keyset."""

    def page_runs(
        self: Dialect,
        *,
        status: RunStatus | None = None,
        queue: str | None = None,
        task: str | None = None,
        tags: Mapping[str, str] | None = None,
        before: str | None = None,
        limit: int = 100,
    ) -> list[RunRecord]:
        params = browsing.page_params(status, queue, task, tags, before, limit)
        return [records.run_record(row, self._to_time, self._to_json) for row in self._rows("page_runs", params)]


class TelemetryReads:
    """`port.TelemetryVerbs`: the event stream and the fleet-wide gauges of `/metrics`."""

    def events_after(self: Dialect, after: int, limit: int) -> list[EventRecord]:
        rows = self._rows("events_after", {"after": after, "limit": limit})
        return [records.event_record(row, self._to_time, self._to_json) for row in rows]

    def latest_events(self: Dialect, kind: str, limit: int) -> list[EventRecord]:
        rows = self._rows("latest_events", {"type": kind, "limit": limit})
        return [records.event_record(row, self._to_time, self._to_json) for row in rows]

    def last_event_id(self: Dialect) -> int:
        rows = self._tuples("last_event_id")
        return int(rows[0][0]) if rows else 0  # coalesce(max(id), 0) always returns its one row

    def queued_shapes(self: Dialect) -> list[QueuedShape]:
        return [
            QueuedShape(queue, partition, self._to_json(tags) or {}, runs, rate)
            for queue, partition, tags, rate, runs in self._tuples("queued_shapes")
        ]

    def run_counts(self: Dialect) -> dict[tuple[str, RunStatus], int]:
        return {(queue, RunStatus(status)): count for queue, status, count in self._tuples("run_counts")}


class QueueReads:
    """The counts of `port.QueueVerbs`."""

    def queue_counts(self: Dialect) -> dict[str, QueueCounts]:
        return {queue: QueueCounts(queued, running) for queue, queued, running in self._tuples("queue_counts")}


class LimitReads:
    """The live overrides and scope usage of `port.LimitVerbs`."""

    def limit_overrides(self: Dialect) -> list[LimitOverride]:
        return [
            # to_time is typed Optional; this column is NOT NULL
            LimitOverride(target, limit, version, self._to_time(at))  # type: ignore[arg-type]
            for target, limit, version, at in self._tuples("load_overrides")
        ]

    def scope_usage(self: Dialect) -> dict[str, int]:
        return dict(self._tuples("scope_usage"))

    def scope_holders(self: Dialect, scope: str) -> list[HolderRecord]:
        return [records.holder_record(row, self._to_time) for row in self._rows("scope_holders", {"scope": scope})]


class PoolReads:
    """The reads of `port.PoolVerbs`."""

    def pools(self: Dialect) -> list[PoolStatus]:
        return [pool_rows.pool_status(tuple(row)) for row in self._tuples("pools")]

    def pool_holders(self: Dialect, pool: str) -> list[HolderRecord]:
        return [records.holder_record(row, self._to_time) for row in self._rows("pool_holders", {"pool": pool})]

    def pool_waiters(self: Dialect, pool: str) -> list[PoolWaiter]:
        return [
            PoolWaiter(run_id, step_key, attempt, slots, self._to_time(since))
            for run_id, step_key, attempt, slots, since in self._tuples("pool_waiters", {"pool": pool})
        ]


class StepReads:
    """A run's step checkpoints (`port.StepVerbs.run_steps`)."""

    def run_steps(self: Dialect, run_id: str) -> list[StepRecord]:
        rows = self._rows("run_steps", {"run_id": run_id})
        return [records.step_record(row, self._to_time, self._to_json) for row in rows]


class ScheduleReads:
    """Every stored schedule (`port.ScheduleVerbs.list_schedules`)."""

    def list_schedules(self: Dialect) -> list[ScheduleRecord]:
        rows = self._rows("list_schedules")
        return [scheduling.schedule_record(row, self._to_time, self._to_json) for row in rows]
