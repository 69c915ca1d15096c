"""A pool's stored row to and from the pure rules (`domain.pool_settings`), shared by both adapters.

Each adapter reads the row under its own lock, asks the rules for the next
row and stores it with this module's parameters, so a declaration, an
override and a reset are written one way on both dialects.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from tidegate.domain import pool_settings
from tidegate.domain.pool_settings import PoolRow, PoolSetting
from tidegate.domain.steps import PoolConfig, PoolStatus
from tidegate.storage.shared.settings import SettingKind


def _setting(limit: int | None, lease: float | None) -> PoolSetting | None:
    return None if limit is None or lease is None else PoolSetting(limit, lease)


def pool_row(row: Sequence[Any] | None) -> PoolRow:
    """A `pool_row` result (declared limit and lease, override limit and lease, version); None: no row."""
    if row is None:
        return PoolRow()
    declared_limit, declared_lease, override_limit, override_lease, version = row
    return PoolRow(_setting(declared_limit, declared_lease), _setting(override_limit, override_lease), version)


def save_params(name: str, row: PoolRow) -> dict[str, Any]:
    """`save_pool`'s parameters (the caller deletes a row with nothing in force instead)."""
    in_force = row.in_force
    assert in_force is not None, "a pool with neither a declaration nor an override is deleted, not saved"
    declared, override = row.declared, row.override
    return {
        "name": name,
        "limit": in_force.limit,
        "lease": in_force.lease_seconds,
        "declared_limit": None if declared is None else declared.limit,
        "declared_lease": None if declared is None else declared.lease_seconds,
        "override_limit": None if override is None else override.limit,
        "override_lease": None if override is None else override.lease_seconds,
        "version": row.version,
    }


def pool_status(row: Sequence[Any]) -> PoolStatus:
    """A `pools` result row: name, limit and lease in force, claimed, pending, then the stored settings."""
    name, limit, lease, claimed, pending, *settings = row
    stored = pool_row(settings) if limit is not None else PoolRow()
    declared = stored.declared
    return PoolStatus(name, limit, lease, claimed, pending, stored.source, None if declared is None else declared.limit)


def pool_config(name: str, row: PoolRow, updated_at: datetime | None) -> PoolConfig | None:
    """What a change leaves in force (None: the pool is unconfigured again)."""
    in_force = row.in_force
    if in_force is None or updated_at is None:
        return None
    return PoolConfig(name, in_force.limit, in_force.lease_seconds, updated_at, row.source)


POOL: SettingKind[PoolRow, PoolConfig] = SettingKind(
    scope=lambda name: f"pool:{name}",
    row_query="pool_row",
    save_query="save_pool",
    delete_query="delete_pool",
    row=pool_row,
    save_params=save_params,
    event=lambda name, before, after, live: pool_settings.change_event(name, before, after, live=live),
    shown=pool_config,
)


class PoolSettingVerbs:
    """The pool-limit verbs as steps of the one rule (domain/pool_settings.py); each adapter
    applies a step to the stored row in its own transaction (`_change`)."""

    def _change(self, pool: str, step: Callable[[PoolRow], PoolRow], live: bool) -> PoolConfig | None:
        raise NotImplementedError

    def declare_pool(self, pool: str, limit: int, lease_seconds: float) -> PoolConfig:
        config = self._change(pool, lambda row: pool_settings.declare(row, PoolSetting(limit, lease_seconds)), False)
        assert config is not None  # a declaration always leaves a value in force
        return config

    def set_pool_limit(self, pool: str, limit: int, lease_seconds: float) -> PoolConfig:
        config = self._change(pool, lambda row: pool_settings.override(row, PoolSetting(limit, lease_seconds)), True)
        assert config is not None  # an override is in force
        return config

    def reset_pool_limit(self, pool: str) -> PoolConfig | None:
        return self._change(pool, pool_settings.reset, True)
