"""PostgreSQL: a pool's limit or a named rate's windows changed in one transaction
(`storage/shared/settings.py`).

The change locks the setting's scope row, which every step claim of that pool or rate locks
too, so no claim decides on the old value after the change commits.
"""

from __future__ import annotations

from collections.abc import Callable

from tidegate.storage.postgres.database import Aggregate
from tidegate.storage.postgres.payloads import event_params, to_time
from tidegate.storage.postgres.pipeline import transaction
from tidegate.storage.postgres.steps import READ_COMMITTED
from tidegate.storage.shared import wakes
from tidegate.storage.shared.settings import Row, SettingKind, Shown


class SettingChanges(Aggregate):
    """The one transaction of a setting's change, for each kind of setting."""

    def _change_setting(
        self, kind: SettingKind[Row, Shown], name: str, step: Callable[[Row], Row], live: bool
    ) -> Shown | None:
        """Read the row, apply the rule, store the result and its audit, wake waiting steps."""
        at = None
        with self._connection() as connection, transaction(connection, READ_COMMITTED):
            self._lock_scopes(connection, [kind.scope(name)])
            before = kind.row(connection.execute(self._q(kind.row_query), {"name": name}).fetchone())
            after = step(before)
            if after.in_force is None:
                connection.execute(self._q(kind.delete_query), {"name": name})
            else:
                saved = connection.execute(self._q(kind.save_query), kind.save_params(name, after)).fetchone()
                at = None if saved is None else to_time(saved[0])
            event = kind.event(name, before, after, live)
            if event is not None:
                connection.execute(self._q("insert_event"), event_params(None, event))
            wakes.only_if(event is not None)  # a raised limit or rate lets waiting steps in sooner
        return kind.shown(name, after, at)
