"""Schedules: what a declared schedule is, and which of its due ticks fire.

A schedule submits a run of its task at each tick of a cron expression in a
time zone. The expression itself is read by a cron library in the engine
(`engine/runtime/cron.py`, so the domain keeps to the standard library); what is
decided here is pure: which due ticks a schedule fires after downtime (its
`missed` policy) and the run a tick submits. Both stores keep a schedule's
cursor (`next_fire_at`: the earliest tick not yet fired or skipped) and one
row per fired tick, unique per (schedule, tick): that key is what makes a
tick fire once however many workers see it due.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Literal

from tidegate.domain import names
from tidegate.domain.errors import InvalidArgument
from tidegate.domain.jsonvalue import JSONValue
from tidegate.domain.limits import QueueConfig
from tidegate.domain.model import NewRun, TaskDefinition
from tidegate.domain.rate_costs import cost_of
from tidegate.domain.scopes import partition_of, rate_partition_of

MissedTicks = Literal["skip", "catch_up"]
SKIP: MissedTicks = "skip"
CATCH_UP: MissedTicks = "catch_up"
MISSED_POLICIES: tuple[MissedTicks, ...] = (SKIP, CATCH_UP)

# `catch_up` fires at most this many missed ticks (the latest ones) after a downtime, so that a
# schedule every minute does not flood its queue with a week of runs when the workers come back.
CATCH_UP_LIMIT = 100


@dataclass(frozen=True, slots=True)
class ScheduleDefinition:
    """A schedule as declared in code: its task, when, with which args, and what to do with missed ticks."""

    name: str
    task: str
    cron: str
    timezone: str
    args: dict[str, JSONValue] = field(default_factory=dict)
    missed: MissedTicks = SKIP


@dataclass(frozen=True, slots=True)
class NewSchedule:
    """A declaration to store, with the first tick it fires if the store has no cursor for it yet."""

    definition: ScheduleDefinition
    first_fire_at: datetime


@dataclass(frozen=True, slots=True)
class ScheduleRecord:
    """A stored schedule with its cursor: the next tick to fire and the last one fired."""

    definition: ScheduleDefinition
    next_fire_at: datetime
    last_fire_at: datetime | None
    last_run_id: str | None
    paused: bool

    @property
    def name(self) -> str:
        return self.definition.name

    def document(self) -> dict[str, Any]:
        """The schedule as `schedules list --json` and `GET /api/v1/schedules` show it: one shape for both."""
        definition = self.definition
        return {
            "name": definition.name,
            "task": definition.task,
            "cron": definition.cron,
            "timezone": definition.timezone,
            "args": definition.args,
            "missed": definition.missed,
            "paused": self.paused,
            "next_fire_at": None if self.paused else self.next_fire_at,
            "last_fire_at": self.last_fire_at,
            "last_run_id": self.last_run_id,
        }


@dataclass(frozen=True, slots=True)
class Tick:
    """One tick to fire and the run it submits."""

    at: datetime
    run: NewRun


@dataclass(frozen=True, slots=True)
class Firing:
    """What one pass fires for one schedule, applied by `Store.fire_schedule` in one transaction.

    `expected_next` is the cursor this plan was computed from: the store fires
    nothing if another worker moved it meanwhile. `skipped_from` is the first
    due tick that was dropped (the missed policy), if any.
    """

    schedule: str
    expected_next: datetime
    ticks: tuple[Tick, ...]
    next_fire_at: datetime
    skipped_from: datetime | None = None


def check_missed(value: Any) -> MissedTicks:
    for policy in MISSED_POLICIES:
        if value == policy:
            return policy
    raise InvalidArgument(f"missed={value!r} is not valid: use 'skip' or 'catch_up'")


def check_schedule_name(value: Any) -> str:
    return names.check_name("schedule", value)


def ticks_to_fire(due: Sequence[datetime], missed: MissedTicks) -> list[datetime]:
    """Which of a schedule's due ticks (oldest first) fire now.

    Without downtime exactly one tick is due and it fires under both policies.
    After downtime, `skip` fires only the latest due tick (one run, late,
    rather than none: a nightly report still runs once when the workers come
    back) and drops the others; `catch_up` fires every missed tick, oldest
    first, at most the latest CATCH_UP_LIMIT of them.
    """
    if not due:
        return []
    if missed == SKIP:
        return [due[-1]]
    return list(due[-CATCH_UP_LIMIT:])


def scheduled_run(
    run_id: str, definition: TaskDefinition, queue: QueueConfig | None, args: dict[str, JSONValue]
) -> NewRun:
    """The run a tick submits: the task's stored defaults, due at once (the tick is its time), or after
    its debounce. Under the task's `Unique` rule a tick that meets the key's holder is skipped, never
    raised (`on_conflict="raise"` would stop the schedule at every pass): the store records it."""
    claim = (
        None if definition.unique is None else definition.unique.key_of(definition.name, definition.queue, args, None)
    )
    if claim is not None and claim.on_conflict == "raise":
        claim = replace(claim, on_conflict="existing")
    return NewRun(
        id=run_id,
        task=definition.name,
        queue=definition.queue,
        partition=partition_of(queue, definition.name, args, None),
        rate_partition=rate_partition_of(queue, definition.name, args),
        rate_cost=cost_of(definition.name, definition.rate_cost, None, args, () if queue is None else queue.rate),
        args=dict(args),
        priority=definition.priority,
        tags=dict(definition.tags),
        concurrency_key=None,
        max_attempts=definition.max_attempts,
        retry_backoff=definition.retry_backoff,
        timeout=definition.timeout,
        delay=0.0 if claim is None or claim.debounce is None else claim.debounce,
        deadline=(
            definition.dispatch_deadline
            if definition.dispatch_deadline is not None
            else None
            if queue is None
            else queue.dispatch_deadline
        ),
        unique=claim,
    )
