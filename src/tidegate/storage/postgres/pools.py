"""PostgreSQL pools: the limits of step-level gates and what holds them.

A pool's limit is changed under the lock of its scope row, so no step claim
of that pool is deciding meanwhile (see `steps.py`). Which of the code's
declaration and a live override is in force is `domain.pool_settings`'s rule.
"""

from __future__ import annotations

from collections.abc import Callable

from tidegate.domain.pool_settings import PoolRow
from tidegate.domain.steps import PoolConfig
from tidegate.storage import port
from tidegate.storage.postgres.settings import SettingChanges
from tidegate.storage.shared import pool_rows
from tidegate.storage.shared.reads import PoolReads


class Pools(pool_rows.PoolSettingVerbs, SettingChanges, PoolReads, port.PoolVerbs):
    """The pool verbs of the storage port: each change is the dialect's one setting transaction."""

    def _change(self, pool: str, step: Callable[[PoolRow], PoolRow], live: bool) -> PoolConfig | None:
        return self._change_setting(pool_rows.POOL, pool, step, live)
