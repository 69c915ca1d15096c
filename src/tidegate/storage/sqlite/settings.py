"""SQLite: a pool's limit or a named rate's windows changed in one write transaction
(`storage/shared/settings.py`); the single writer keeps every step claim out meanwhile.
"""

from __future__ import annotations

from collections.abc import Callable

from tidegate.storage.shared import wakes
from tidegate.storage.shared.settings import Row, SettingKind, Shown
from tidegate.storage.sqlite.database import Aggregate
from tidegate.storage.sqlite.payloads import event_row, to_time


class SettingChanges(Aggregate):
    """The one transaction of a setting's change, for each kind of setting."""

    def _change_setting(
        self, kind: SettingKind[Row, Shown], name: str, step: Callable[[Row], Row], live: bool
    ) -> Shown | None:
        """Read the row, apply the rule, store the result and its audit, wake waiting steps."""
        at = None
        with self._write() as (connection, now):
            before = kind.row(connection.execute(self._q(kind.row_query), {"name": name}).fetchone())
            after = step(before)
            if after.in_force is None:
                connection.execute(self._q(kind.delete_query), {"name": name})
            else:
                saved = connection.execute(self._q(kind.save_query), {**kind.save_params(name, after), "now": now})
                at = to_time(saved.fetchone()[0])
            event = kind.event(name, before, after, live)
            if event is not None:
                connection.execute(self._q("insert_event"), event_row(None, event, now))
        wakes.only_if(event is not None)  # a raised limit or rate lets waiting steps in sooner
        return kind.shown(name, after, at)
