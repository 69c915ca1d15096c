"""Schedules at work: declaring them and firing due ticks (an operator's controls are
`engine.operators.schedules`).

Every worker calls `fire_due` from its maintenance thread about once a second.
Each due schedule gets a firing (`Firing`: the ticks its missed policy fires, each
with a fresh run, and the cursor after them) computed here from the cron
expression, and `Store.fire_schedule` applies it in one transaction that fires
nothing if another worker got there first, so a tick submits exactly one run
however many workers see it due, and a tick due while every worker was down is
fired (or skipped, per policy) by the first worker back.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from datetime import datetime

from tidegate.domain.errors import TidegateError, UnknownTask
from tidegate.domain.limits import QueueConfig
from tidegate.domain.model import NewRun, TaskDefinition
from tidegate.domain.run_ids import new_run_id
from tidegate.domain.schedules import (
    CATCH_UP_LIMIT,
    Firing,
    NewSchedule,
    ScheduleDefinition,
    ScheduleRecord,
    Tick,
    scheduled_run,
    ticks_to_fire,
)
from tidegate.engine.runtime.cron import Cron
from tidegate.storage.port import Store

log = logging.getLogger("tidegate.schedules")

FIRE_EVERY = 1.0  # seconds between a worker's looks for due ticks: a tick fires within about a second

RunFor = Callable[[ScheduleDefinition], NewRun]


def declare(definition: ScheduleDefinition, now: datetime) -> NewSchedule:
    """Check the expression and zone (a bad one raises InvalidArgument naming it) and pick the first
    tick after `now`, used only if the store has no cursor for this schedule yet."""
    return NewSchedule(definition, Cron(definition.cron, definition.timezone).next_after(now))


def firing_of(record: ScheduleRecord, now: datetime, run_for: RunFor) -> Firing:
    """What to fire for a schedule due at `now` (see `domain.schedules.ticks_to_fire`)."""
    definition = record.definition
    cron = Cron(definition.cron, definition.timezone)
    due, older_left_out = cron.due(record.next_fire_at, now, CATCH_UP_LIMIT)
    chosen = ticks_to_fire(due, definition.missed)
    dropped = older_left_out or len(chosen) < len(due)
    return Firing(
        schedule=record.name,
        expected_next=record.next_fire_at,
        ticks=tuple(Tick(at, run_for(definition)) for at in chosen),
        next_fire_at=cron.next_after(now),
        skipped_from=record.next_fire_at if dropped else None,
    )


def fire_due(store: Store) -> int:
    """Fire every due tick of every schedule (those another worker fires first are skipped); the runs stored.

    A schedule that cannot fire (its task was never registered, an admission ceiling refuses)
    is logged and tried again at the next look; the others go on."""
    now, due = store.due_schedules()
    if not due:
        return 0
    runs = _RunBuilder(store)
    fired = 0
    for record in due:
        try:
            firing = firing_of(record, now, runs.build)
            stored = store.fire_schedule(firing)
        except TidegateError as error:
            log.warning("schedule %s: not fired: %s", record.name, error)
            continue
        fired += len(stored)
        if stored:
            ticks = ", ".join(tick.at.isoformat() for tick in firing.ticks)
            log.info(
                "schedule %s: fired %d run(s) of %s for tick %s",
                record.name,
                len(stored),
                record.definition.task,
                ticks,
            )
    return fired


class _RunBuilder:
    """Fresh runs of scheduled tasks, from their stored definitions (read once per pass)."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._tasks: dict[str, TaskDefinition | None] = {}
        self._queues: Mapping[str, QueueConfig] | None = None

    def build(self, definition: ScheduleDefinition) -> NewRun:
        if definition.task not in self._tasks:
            self._tasks[definition.task] = self._store.get_task(definition.task)
        task = self._tasks[definition.task]
        if task is None:
            raise UnknownTask(f"unknown task {definition.task!r}: no app has registered it in this database")
        if self._queues is None:
            self._queues = self._store.rules().queues
        return scheduled_run(new_run_id(), task, self._queues.get(task.queue), definition.args)
