"""PostgreSQL pools: the limits of step-level gates and what holds them.

A pool's limit is changed under the lock of its scope row, so no step claim
of that pool is deciding meanwhile (see `steps.py`).
"""

from __future__ import annotations

from tidegate.domain.model import HolderRecord
from tidegate.domain.steps import PoolConfig, PoolStatus
from tidegate.storage import records
from tidegate.storage.postgres.database import Aggregate
from tidegate.storage.postgres.payloads import to_time
from tidegate.storage.postgres.pipeline import transaction
from tidegate.storage.postgres.steps import READ_COMMITTED


class Pools(Aggregate):
    """The pool verbs of the storage port."""

    def set_pool_limit(self, pool: str, limit: int, lease_seconds: float) -> PoolConfig:
        with self._connection() as connection:
            with transaction(connection, READ_COMMITTED):
                self._lock_scopes(connection, [f"pool:{pool}"])
                saved = connection.execute(
                    self._q("set_pool_limit"), {"name": pool, "limit": limit, "lease": lease_seconds}
                )
            # fetchone() is typed Optional; this statement always returns one row
            name, stored, lease, at, _ = saved.fetchone()  # type: ignore[misc]
        # to_time is typed Optional; this column is NOT NULL
        return PoolConfig(name, stored, lease, to_time(at))  # type: ignore[arg-type]

    def pools(self) -> list[PoolStatus]:
        with self._connection() as connection:
            rows = connection.execute(self._q("pools")).fetchall()
        return [PoolStatus(name, limit, lease, claimed, pending) for name, limit, lease, claimed, pending in rows]

    def pool_holders(self, pool: str) -> list[HolderRecord]:
        return [records.holder_record(row, to_time) for row in self._fetch_dicts("pool_holders", {"pool": pool})]
