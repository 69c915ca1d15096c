"""Pools for an operator and for the code: read them, validate a change first, then one upsert,
so bad input changes nothing.

`App.set_pool_limit` (the code's declaration), `tidegate pools set`, `PUT /pools/NAME` and
the dashboard's form (a live override) all come through here, so a limit, a name or a lease
duration is judged, and a lease left out is filled, the same way wherever it is given.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from tidegate.domain.durations import parse_duration
from tidegate.domain.errors import ConfigurationError, InvalidArgument
from tidegate.domain.model import HolderRecord
from tidegate.domain.pools import check_pool_limit, check_pool_name
from tidegate.domain.steps import PoolConfig, PoolStatus, PoolWaiter
from tidegate.domain.tunables import DEFAULT_POOL_LEASE, MIN_LEASE
from tidegate.storage.port import Store


class InvalidField(InvalidArgument):
    """A bad value, naming the field it came in (`name`, `limit`, `lease_duration`), so the API
    can point a client at the value to fix."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        super().__init__(message)


@contextmanager
def _field(field: str) -> Iterator[None]:
    try:
        yield
    except (InvalidArgument, ConfigurationError) as error:
        raise InvalidField(field, str(error)) from None


@dataclass(frozen=True)
class PoolChange:
    before: PoolStatus | None  # None: the pool was new
    config: PoolConfig


def parse_pool_limit(text: str, name: str = "LIMIT") -> int:
    """A pool limit as typed (the CLI's LIMIT, the dashboard's form): a whole number >= 0."""
    try:
        value = int(text.strip())
    except ValueError:
        value = -1
    if value < 0:
        raise InvalidField("limit", f"{name} {text!r} is not valid: use a whole number >= 0 (0 pauses the pool)")
    return value


def list_pools(store: Store) -> list[PoolStatus]:
    """Every pool a step asked for or someone configured, with its usage (the sum of its holders)."""
    return store.pools()


def find_pool(store: Store, pool: Any) -> PoolStatus | None:
    """The pool named `pool`, or None; a name no pool can have is refused before it reaches SQL."""
    with _field("name"):
        name = check_pool_name(pool)
    return next((status for status in store.pools() if status.name == name), None)


def pool_holders(store: Store, pool: str) -> list[HolderRecord]:
    return store.pool_holders(pool)


def pool_waiters(store: Store, pool: str) -> list[PoolWaiter]:
    """The steps a pool's `pending` counts: what the CLI, the API and the dashboard list."""
    return store.pool_waiters(pool)


def change_pool(store: Store, pool: Any, limit: Any, lease_duration: Any = None) -> PoolChange:
    """A live override of `pool`'s limit (0 pauses it) and lease, kept until reset; wakes waiting
    steps. No lease given keeps the pool's own (else the default). Every value is checked first."""
    before = find_pool(store, pool)
    with _field("limit"):
        slots = check_pool_limit(limit)
    if lease_duration is None:
        lease_duration = DEFAULT_POOL_LEASE if before is None or before.lease_seconds is None else before.lease_seconds
    with _field("lease_duration"):
        seconds = check_lease(lease_duration)
    return PoolChange(before, store.set_pool_limit(pool, slots, seconds))


def check_lease(lease_duration: Any) -> float:
    """A pool's lease: a human duration ('30s', '5m') or seconds, at least 300ms."""
    if not isinstance(lease_duration, (str, int, float)) or isinstance(lease_duration, bool):
        raise InvalidArgument(f"lease_duration must be a duration like '5m', got {lease_duration!r}")
    seconds = parse_duration(lease_duration, name="lease_duration")
    if seconds < MIN_LEASE:
        raise InvalidArgument(f"lease_duration must be at least 300ms, got {lease_duration!r}")
    return seconds


def declare_pool_limit(store: Store, pool: Any, limit: Any, lease_duration: Any = DEFAULT_POOL_LEASE) -> PoolConfig:
    """The code's limit of `pool` (0 pauses it) and its lease: in force unless overridden live."""
    return store.declare_pool(check_pool_name(pool), check_pool_limit(limit), check_lease(lease_duration))


def reset_pool_limit(store: Store, pool: Any) -> PoolConfig | None:
    """Drop `pool`'s live override: the code's value again (None: no code value, unconfigured)."""
    return store.reset_pool_limit(check_pool_name(pool))
