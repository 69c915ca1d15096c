"""Schedule rows, shared by both adapters: a stored row as a `ScheduleRecord`, a firing as rows.

Times are passed in as each dialect keeps them (epoch seconds on SQLite, timestamptz on
PostgreSQL) through the two conversions `records.py` also takes, so the mapping exists once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from tidegate.domain import events as history
from tidegate.domain.errors import ScheduleNotFound
from tidegate.domain.events import Event
from tidegate.domain.schedules import Firing, ScheduleDefinition, ScheduleRecord, check_missed
from tidegate.domain.unique import Admission
from tidegate.storage.shared.records import ToJSON, ToTime


class AlreadyFired(Exception):
    """Raised inside a firing's transaction to roll it back: a tick's row was there already."""


def schedule_record(row: Mapping[str, Any], to_time: ToTime, to_json: ToJSON) -> ScheduleRecord:
    next_fire_at = to_time(row["next_fire_at"])
    assert next_fire_at is not None  # NOT NULL in both schemas
    return ScheduleRecord(
        definition=ScheduleDefinition(
            name=row["name"],
            task=row["task"],
            cron=row["cron"],
            timezone=row["timezone"],
            args=to_json(row["args"]) or {},
            missed=check_missed(row["missed"]),
        ),
        next_fire_at=next_fire_at,
        last_fire_at=to_time(row["last_fire_at"]),
        last_run_id=row["last_run_id"],
        paused=bool(row["paused"]),
    )


def definition_row(definition: ScheduleDefinition, next_fire_at: Any) -> dict[str, Any]:
    return {
        "name": definition.name,
        "task": definition.task,
        "cron": definition.cron,
        "timezone": definition.timezone,
        "missed": definition.missed,
        "next_fire_at": next_fire_at,
    }


def tick_rows(firing: Firing, answers: Sequence[Admission], time_of: Callable[[datetime], Any]) -> list[dict[str, Any]]:
    """Each tick's row, naming the run that stands for it: its own, or the holder of its unique key."""
    return [
        {"tick_at": time_of(tick.at), "run_id": answer.run_id}
        for tick, answer in zip(firing.ticks, answers, strict=True)
    ]


def fired_events(firing: Firing, answers: Sequence[Admission]) -> list[tuple[str, Event]]:
    """(run id, event) for each tick: ScheduleFired on the run it stored, or ScheduleTickSkipped on the
    run holding its unique key (the tick stored nothing: recorded, not lost)."""
    skipped = None if firing.skipped_from is None else firing.skipped_from.isoformat()
    events: list[tuple[str, Event]] = []
    for index, (tick, answer) in enumerate(zip(firing.ticks, answers, strict=True)):
        dropped = skipped if index == 0 else None
        at = tick.at.isoformat()
        if answer.duplicate and tick.run.unique is not None:
            events.append(
                (answer.run_id, history.schedule_tick_skipped(firing.schedule, at, tick.run.unique.key, dropped))
            )
        else:
            events.append((answer.run_id, history.schedule_fired(firing.schedule, at, dropped)))
    return events


def stored_ids(answers: Sequence[Admission]) -> list[str]:
    """The runs a firing stored (a skipped tick's holder is not one)."""
    return [answer.run_id for answer in answers if not answer.duplicate]


def advance_params(firing: Firing, answers: Sequence[Admission], time_of: Callable[[datetime], Any]) -> dict[str, Any]:
    last = firing.ticks[-1] if firing.ticks else None
    return {
        "name": firing.schedule,
        "next_fire_at": time_of(firing.next_fire_at),
        "last_fire_at": None if last is None else time_of(last.at),
        "last_run_id": answers[-1].run_id if answers else None,
    }


def not_found(name: str) -> ScheduleNotFound:
    return ScheduleNotFound(f"no schedule named {name!r} (tidegate schedules list shows them)")
