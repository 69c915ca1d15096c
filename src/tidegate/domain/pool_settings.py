"""Which limit of a pool is in force: the code declares a default, a live change overrides it.

Pools behave like every other limit: `App.set_pool_limit` (run on every import
of the code) declares the default, and a live change (`tidegate pools set`,
`PUT /pools/NAME`) is an override that persists, wins over the code and is
audited until it is reset. Both adapters read a pool's row, ask these rules
for the next row and store it with its `LimitChanged` event, so the rule
exists once. A row stores both settings and the one in force (what claims read).
"""

from __future__ import annotations

from dataclasses import dataclass

from tidegate.domain import events as history
from tidegate.domain.overridable import Overridable
from tidegate.domain.overridable import declare as declare
from tidegate.domain.overridable import override as override
from tidegate.domain.overridable import reset as reset


@dataclass(frozen=True, slots=True)
class PoolSetting:
    """A limit (slots at most in use; 0 pauses the pool) and the lease of each claim, in seconds."""

    limit: int
    lease_seconds: float


PoolRow = Overridable[PoolSetting]  # what is stored of a pool: the code's setting and a live override


def change_event(pool: str, before: PoolRow, after: PoolRow, *, live: bool) -> history.Event | None:
    """The audit of a change: always for a live one; for a declaration, only when the value in force moved
    (an import that declares the same limit again is not news)."""
    old, new = before.in_force, after.in_force
    if not live and old == new:
        return None
    return history.pool_limit_changed(
        pool,
        None if old is None else old.limit,
        None if new is None else new.limit,
        None if new is None else new.lease_seconds,
        source=after.source,
        reset=live and after.override is None,
    )
