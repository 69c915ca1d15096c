"""Configuring a pool: validate first, then one upsert, so bad input changes nothing.

`App.set_pool_limit` and `tidegate pools set` both come through here, so a
limit, a name or a lease duration is judged the same way wherever it is given.
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


def set_pool_limit(store: Store, pool: Any, limit: Any, lease_duration: Any = DEFAULT_POOL_LEASE) -> PoolConfig:
    """Upsert pool `pool` with `limit` slots (0 pauses it) and its lease; wakes waiting steps."""
    name = check_pool_name(pool)
    slots = check_pool_limit(limit)
    lease = check_lease(lease_duration)
    return store.set_pool_limit(name, slots, lease)
