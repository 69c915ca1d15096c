"""Which limit of a pool is in force: the code declares a default, a live change overrides it.

Pools behave like every other limit: `App.set_pool_limit` (run on every import
of the code) declares the default, and a live change (`tidegate pools set`,
`PUT /pools/NAME`) is an override that persists, wins over the code and is
audited until it is reset. Both adapters read a pool's row, ask these rules
for the next row and store it with its `LimitChanged` event, so the rule
exists once. A row stores both settings and the one in force (what claims read).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from tidegate.domain import events as history

CODE = "code"
OVERRIDE = "override"


@dataclass(frozen=True, slots=True)
class PoolSetting:
    """A limit (slots at most in use; 0 pauses the pool) and the lease of each claim, in seconds."""

    limit: int
    lease_seconds: float


@dataclass(frozen=True, slots=True)
class PoolRow:
    """What is stored of a pool: the code's declaration and a live override, either may be absent.

    `version` counts the live changes (set and reset), as for limit overrides."""

    declared: PoolSetting | None = None
    override: PoolSetting | None = None
    version: int = 0

    @property
    def in_force(self) -> PoolSetting | None:
        """The override wins until reset; without either the pool is unconfigured (unlimited)."""
        return self.override if self.override is not None else self.declared

    @property
    def source(self) -> str | None:
        """Where the value in force comes from: 'override', 'code', or None (unconfigured)."""
        if self.override is not None:
            return OVERRIDE
        return CODE if self.declared is not None else None


def declare(row: PoolRow, setting: PoolSetting) -> PoolRow:
    """The code's value: kept as the default, in force only while nobody overrides it."""
    return replace(row, declared=setting)


def override(row: PoolRow, setting: PoolSetting) -> PoolRow:
    """A live change: in force until reset, whatever the code declares meanwhile."""
    return replace(row, override=setting, version=row.version + 1)


def reset(row: PoolRow) -> PoolRow:
    """Drop the override: the code's value is in force again (none declared: unconfigured)."""
    return replace(row, override=None, version=row.version + 1)


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
