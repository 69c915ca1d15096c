"""SQLite pools: the limits of step-level gates and what holds them."""

from __future__ import annotations

from tidegate.domain import events as history
from tidegate.domain.model import HolderRecord
from tidegate.domain.steps import PoolConfig, PoolStatus
from tidegate.storage import records
from tidegate.storage.sqlite.database import Aggregate
from tidegate.storage.sqlite.payloads import event_row, to_time


class Pools(Aggregate):
    """The pool verbs of the storage port."""

    def set_pool_limit(self, pool: str, limit: int, lease_seconds: float) -> PoolConfig:
        with self._write() as (connection, now):
            before = connection.execute(self._q("set_pool_limit_before"), {"name": pool}).fetchone()
            connection.execute(
                self._q("set_pool_limit"), {"name": pool, "limit": limit, "lease": lease_seconds, "now": now}
            )
            changed = history.pool_limit_changed(pool, None if before is None else before[0], limit, lease_seconds)
            connection.execute(self._q("insert_event"), event_row(None, changed, now))
        self._notifier.notify()  # a raised limit lets waiting steps in
        # to_time is typed Optional; `now` is a float, never None
        return PoolConfig(pool, limit, lease_seconds, to_time(now))  # type: ignore[arg-type]

    def pools(self) -> list[PoolStatus]:
        return [
            PoolStatus(name, limit, lease, claimed, pending)
            for name, limit, lease, claimed, pending in self._connection().execute(self._q("pools"))
        ]

    def pool_holders(self, pool: str) -> list[HolderRecord]:
        rows = self._connection().execute(self._q("pool_holders"), {"pool": pool})
        return [records.holder_record(row, to_time) for row in rows]
