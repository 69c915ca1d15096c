"""Schedules as an operator sees and controls them: list, find, pause, resume, remove.

`tidegate schedules`, `/api/v1/schedules` and the dashboard's schedules page all come
through here. A resume starts at the first tick after `now` (a pause's ticks are not made
up); a pause is stored apart from the declaration, so a worker restarting with the same
code never undoes it. Firing the ticks is the workers' job (`engine.runtime.schedules`).
"""

from __future__ import annotations

from datetime import datetime

from tidegate.domain.schedules import ScheduleRecord
from tidegate.engine.runtime.cron import Cron
from tidegate.storage.port import Store


def list_schedules(store: Store) -> list[ScheduleRecord]:
    """Every stored schedule, with its next and last fire and whether it is paused."""
    return store.list_schedules()


def find_schedule(store: Store, name: str) -> ScheduleRecord | None:
    """The stored schedule named `name`, or None."""
    return next((record for record in store.list_schedules() if record.name == name), None)


def set_paused(store: Store, name: str, paused: bool, now: datetime) -> bool:
    """Pause or resume a schedule; a resume starts at the first tick after `now`. True if it
    changed; ScheduleNotFound for an unknown name."""
    next_fire_at = None
    if not paused:
        record = find_schedule(store, name)
        if record is not None:
            next_fire_at = Cron(record.definition.cron, record.definition.timezone).next_after(now)
    return store.set_schedule_paused(name, paused, next_fire_at)


def remove_schedule(store: Store, name: str) -> None:
    """Delete a stored schedule (its runs stay); ScheduleNotFound for an unknown name."""
    store.remove_schedule(name)
