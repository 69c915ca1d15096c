"""Tunables read from the environment (`TIDEGATE_*`), with their defaults.

They are read when a worker or app is built, not at import, so tests and
scripts can set them per process.
"""

from __future__ import annotations

import os

from tidegate.domain.durations import parse_duration

DEFAULTS = {
    "TIDEGATE_LEASE_DURATION": "30s",
    "TIDEGATE_POLL_INTERVAL": "1s",
    "TIDEGATE_SWEEP_INTERVAL": "",  # default: a third of the lease duration
    "TIDEGATE_CANCEL_GRACE": "5s",
    "TIDEGATE_SHUTDOWN_GRACE": "30s",
    "TIDEGATE_OVERFLOW_INTERVAL": "30s",
}


def duration_setting(name: str) -> float:
    raw = os.environ.get(name) or DEFAULTS[name]
    return parse_duration(raw, name=name)


def sweep_interval(lease_duration: float) -> float:
    raw = os.environ.get("TIDEGATE_SWEEP_INTERVAL")
    if raw:
        return parse_duration(raw, name="TIDEGATE_SWEEP_INTERVAL")
    return lease_duration / 3
