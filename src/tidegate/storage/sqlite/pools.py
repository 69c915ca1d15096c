"""SQLite pools: the limits of step-level gates and what holds them.

Which of the code's declaration and a live override is in force is
`domain.pool_settings`'s rule, read and written in one write transaction.
"""

from __future__ import annotations

from collections.abc import Callable

from tidegate.domain import pool_settings
from tidegate.domain.pool_settings import PoolRow
from tidegate.domain.steps import PoolConfig
from tidegate.storage import port
from tidegate.storage.shared import pool_rows, wakes
from tidegate.storage.shared.reads import PoolReads
from tidegate.storage.sqlite.database import Aggregate
from tidegate.storage.sqlite.payloads import event_row, to_time


class Pools(pool_rows.PoolSettingVerbs, Aggregate, PoolReads, port.PoolVerbs):
    """The pool verbs of the storage port."""

    def _change(self, pool: str, step: Callable[[PoolRow], PoolRow], live: bool) -> PoolConfig | None:
        """Read the row, apply the rule, store the result and its audit, wake waiting steps."""
        at = None
        with self._write() as (connection, now):
            before = pool_rows.pool_row(connection.execute(self._q("pool_row"), {"name": pool}).fetchone())
            after = step(before)
            if after.in_force is None:
                connection.execute(self._q("delete_pool"), {"name": pool})
            else:
                saved = connection.execute(self._q("save_pool"), {**pool_rows.save_params(pool, after), "now": now})
                at = to_time(saved.fetchone()[0])
            event = pool_settings.change_event(pool, before, after, live=live)
            if event is not None:
                connection.execute(self._q("insert_event"), event_row(None, event, now))
        wakes.only_if(event is not None)  # a raised limit lets waiting steps in
        return pool_rows.pool_config(pool, after, at)
