"""Configuring a pool: validate first, then one upsert, so bad input changes nothing.

`App.set_pool_limit` (the code's declaration) and `tidegate pools set` /
`PUT /pools/NAME` (a live override) both come through here, so a limit, a name
or a lease duration is judged the same way wherever it is given.
"""

from __future__ import annotations

from typing import Any

from tidegate.domain.durations import parse_duration
from tidegate.domain.errors import InvalidArgument
from tidegate.domain.pools import check_pool_limit, check_pool_name
from tidegate.domain.steps import PoolConfig
from tidegate.domain.tunables import DEFAULT_POOL_LEASE, MIN_LEASE
from tidegate.storage.port import Store


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


def set_pool_limit(store: Store, pool: Any, limit: Any, lease_duration: Any = DEFAULT_POOL_LEASE) -> PoolConfig:
    """A live override of `pool`'s limit (0 pauses it) and lease, kept until reset; wakes waiting steps."""
    return store.set_pool_limit(check_pool_name(pool), check_pool_limit(limit), check_lease(lease_duration))


def reset_pool_limit(store: Store, pool: Any) -> PoolConfig | None:
    """Drop `pool`'s live override: the code's value again (None: no code value, unconfigured)."""
    return store.reset_pool_limit(check_pool_name(pool))
