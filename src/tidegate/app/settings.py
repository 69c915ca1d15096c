"""Tunables read from the environment (`TIDEGATE_*`), with their defaults.

They are read when a worker or app is built, not at import, so tests and
scripts can set them per process.
"""

from __future__ import annotations

import os

from tidegate.domain.durations import parse_duration
from tidegate.domain.errors import ConfigurationError
from tidegate.engine.pools import ClaimPolicy

DEFAULTS = {
    "TIDEGATE_LEASE_DURATION": "30s",
    "TIDEGATE_POLL_INTERVAL": "1s",
    "TIDEGATE_SWEEP_INTERVAL": "",  # default: a third of the lease duration
    "TIDEGATE_CANCEL_GRACE": "5s",
    "TIDEGATE_SHUTDOWN_GRACE": "30s",
    "TIDEGATE_CLAIM_TIMEOUT": "10m",  # how long a step waits for its pool slots
    "TIDEGATE_CLAIM_POLL_INTERVAL": "1s",  # the fallback poll when no wake-up comes
    "TIDEGATE_CLAIM_POLL_JITTER": "500ms",  # random extra on each poll, so waiters do not march in step
    "TIDEGATE_OVERFLOW_INTERVAL": "30s",
    "TIDEGATE_LISTEN_CHECK_INTERVAL": "5s",  # PostgreSQL: round trip on each wake-up connection
}


def duration_setting(name: str) -> float:
    raw = os.environ.get(name) or DEFAULTS[name]
    return parse_duration(raw, name=name)


def sweep_interval(lease_duration: float) -> float:
    raw = os.environ.get("TIDEGATE_SWEEP_INTERVAL")
    if raw:
        return parse_duration(raw, name="TIDEGATE_SWEEP_INTERVAL")
    return lease_duration / 3


def listen_check_interval() -> float:
    """How often a PostgreSQL wake-up connection proves it is alive; 0 would check without pause."""
    name = "TIDEGATE_LISTEN_CHECK_INTERVAL"
    seconds = duration_setting(name)
    if seconds <= 0:
        raise ConfigurationError(f"{name}: must be more than 0, got {os.environ.get(name)!r}")
    return seconds


def claim_policy() -> ClaimPolicy:
    """How the PoolGuard waits for pool slots, from TIDEGATE_CLAIM_* (read now, not at import)."""
    return ClaimPolicy(
        timeout=duration_setting("TIDEGATE_CLAIM_TIMEOUT"),
        poll_interval=duration_setting("TIDEGATE_CLAIM_POLL_INTERVAL"),
        poll_jitter=duration_setting("TIDEGATE_CLAIM_POLL_JITTER"),
    )
