"""SQLite schedules: declarations, their cursors, and firing a tick with its run.

A firing is one `BEGIN IMMEDIATE` transaction: the cursor is read and checked, each
tick's row inserted (unique per schedule and tick), its run stored as a submit stores
one (admission included) and the cursor moved, all or none. The single writer already
serializes two workers firing the same schedule; the tick's key proves it all the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from tidegate.domain.jsonvalue import dumps
from tidegate.domain.schedules import Firing, NewSchedule, ScheduleRecord
from tidegate.storage import port
from tidegate.storage.shared import scheduling, wakes
from tidegate.storage.shared.reads import ScheduleReads
from tidegate.storage.sqlite.database import Aggregate, Database
from tidegate.storage.sqlite.payloads import event_row, to_json, to_time
from tidegate.storage.sqlite.unique import Unique


def _epoch(moment: datetime) -> float:
    return moment.timestamp()


class Schedules(Aggregate, ScheduleReads, port.ScheduleVerbs):
    """The schedule verbs of the storage port."""

    def __init__(self, db: Database, unique: Unique) -> None:
        super().__init__(db)
        self._unique = unique

    def register_schedules(self, schedules: Sequence[NewSchedule]) -> None:
        with self._write() as (connection, now):
            rows = [
                {
                    **scheduling.definition_row(new.definition, _epoch(new.first_fire_at)),
                    "args": dumps(new.definition.args),
                    "now": now,
                }
                for new in schedules
            ]
            connection.executemany(self._q("register_schedules"), rows)

    def due_schedules(self) -> tuple[datetime, list[ScheduleRecord]]:
        now = self._db.clock.wall()
        rows = self._connection().execute(self._q("due_schedules"), {"now": now}).fetchall()
        return datetime.fromtimestamp(now, UTC), [scheduling.schedule_record(row, to_time, to_json) for row in rows]

    def fire_schedule(self, firing: Firing) -> list[str]:
        try:
            with self._write() as (connection, now):
                row = connection.execute(self._q("fire_schedule"), {"name": firing.schedule}).fetchone()
                if row is None or row["paused"] or row["next_fire_at"] != _epoch(firing.expected_next):
                    wakes.only_if(False)
                    return []  # removed, paused, or another worker fired this pass already
                # as a submit stores them: admission, and each tick's unique key judged (domain/unique.py)
                answers = self._unique.admit(connection, [tick.run for tick in firing.ticks], now)
                ticks = dumps(scheduling.tick_rows(firing, answers, _epoch))
                inserted = connection.execute(
                    self._q("fire_schedule_ticks"), {"name": firing.schedule, "ticks": ticks, "now": now}
                ).fetchall()
                if len(inserted) != len(firing.ticks):
                    raise scheduling.AlreadyFired  # rolls back: the run of a fired tick is stored once
                fired = scheduling.fired_events(firing, answers)
                connection.executemany(self._q("insert_event"), [event_row(run, event, now) for run, event in fired])
                advance = scheduling.advance_params(firing, answers, _epoch)
                connection.execute(self._q("fire_schedule_advance"), advance)
        except scheduling.AlreadyFired:
            return []
        stored = scheduling.stored_ids(answers)
        wakes.only_if(bool(stored))  # a tick whose key was held stores nothing
        return stored

    def set_schedule_paused(self, name: str, paused: bool, next_fire_at: datetime | None = None) -> bool:
        params = {
            "name": name,
            "paused": int(paused),
            "next_fire_at": None if next_fire_at is None else _epoch(next_fire_at),
        }
        with self._write() as (connection, now):
            changed = connection.execute(self._q("set_schedule_paused"), {**params, "now": now}).fetchone()
            if changed is None and connection.execute(self._q("set_schedule_paused_exists"), params).fetchone() is None:
                raise scheduling.not_found(name)
        wakes.only_if(changed is not None and not paused)
        return changed is not None

    def remove_schedule(self, name: str) -> None:
        with self._write() as (connection, _now):
            if connection.execute(self._q("remove_schedule"), {"name": name}).fetchone() is None:
                raise scheduling.not_found(name)
