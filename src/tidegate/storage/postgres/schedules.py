"""PostgreSQL schedules: declarations, their cursors, and firing a tick with its run.

A firing is one transaction: the schedule's row is locked `FOR UPDATE` and its cursor
checked (a second worker with the same plan waits, then sees it moved), each tick's row
inserted (unique per schedule and tick: a conflict proves another worker fired it, and
rolls this one back), the runs stored as a submit stores them (the admission ceilings'
locks and count included) with their ScheduleFired events, and the cursor moved.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from tidegate.domain.schedules import Firing, NewSchedule, ScheduleRecord
from tidegate.storage import port
from tidegate.storage.postgres import script_runner, submit_script
from tidegate.storage.postgres.database import Aggregate
from tidegate.storage.postgres.payloads import event_params, payload_json, to_json, to_time
from tidegate.storage.postgres.pipeline import transaction
from tidegate.storage.shared import scheduling, wakes
from tidegate.storage.shared.reads import ScheduleReads


def _iso(moment: datetime) -> str:
    return moment.isoformat()


class Schedules(Aggregate, ScheduleReads, port.ScheduleVerbs):
    """The schedule verbs of the storage port."""

    def register_schedules(self, schedules: Sequence[NewSchedule]) -> None:
        if not schedules:
            return
        latest = {new.definition.name: new for new in schedules}  # an upsert may touch a row only once
        rows = [
            {**scheduling.definition_row(new.definition, _iso(new.first_fire_at)), "args": new.definition.args}
            for new in latest.values()
        ]
        with self._connection() as connection, transaction(connection):
            connection.execute(self._q("register_schedules"), {"schedules": payload_json(rows)})

    def due_schedules(self) -> tuple[datetime, list[ScheduleRecord]]:
        rows = self._fetch_dicts("due_schedules", {})
        now = to_time(rows[0]["now"])
        assert now is not None  # the query always returns the store's time
        return now, [scheduling.schedule_record(row, to_time, to_json) for row in rows if row["name"] is not None]

    def fire_schedule(self, firing: Firing) -> list[str]:
        try:
            with self._connection() as connection, transaction(connection):
                found = connection.execute(self._q("fire_schedule"), {"name": firing.schedule}).fetchone()
                if found is None or found[1] or found[0] != firing.expected_next:
                    wakes.only_if(False)
                    return []  # removed, paused, or another worker fired this pass already
                # the runs by a submit's own script (admission, each tick's unique key judged); a
                # refusal raises AdmissionRejected and rolls the firing back: the tick fires at a later pass
                script = submit_script.submit([tick.run for tick in firing.ticks])
                answers = script_runner.run(connection, self._db.queries, script)
                ticks = payload_json(scheduling.tick_rows(firing, answers, _iso))
                inserted = connection.execute(
                    self._q("fire_schedule_ticks"), {"name": firing.schedule, "ticks": ticks}
                ).fetchall()
                if len(inserted) != len(firing.ticks):
                    raise scheduling.AlreadyFired  # rolls back: the run of a fired tick is stored once
                for run_id, event in scheduling.fired_events(firing, answers):
                    connection.execute(self._q("insert_event"), event_params(run_id, event))
                advance = scheduling.advance_params(firing, answers, _iso)
                connection.execute(self._q("fire_schedule_advance"), advance)
                wakes.only_if(bool(scheduling.stored_ids(answers)))  # a tick whose key was held stores nothing
        except scheduling.AlreadyFired:
            return []
        return scheduling.stored_ids(answers)

    def set_schedule_paused(self, name: str, paused: bool, next_fire_at: datetime | None = None) -> bool:
        params = {"name": name, "paused": paused, "next_fire_at": None if next_fire_at is None else _iso(next_fire_at)}
        with self._connection() as connection:
            with transaction(connection):
                changed = connection.execute(self._q("set_schedule_paused"), params)
                exists = connection.execute(self._q("set_schedule_paused_exists"), params)
            if exists.fetchone() is None:
                raise scheduling.not_found(name)
            return changed.fetchone() is not None

    def remove_schedule(self, name: str) -> None:
        with self._connection() as connection:
            with transaction(connection):
                removed = connection.execute(self._q("remove_schedule"), {"name": name})
            if removed.fetchone() is None:
                raise scheduling.not_found(name)
