"""A worker's settings: what it serves, how much at once, and its timings.

Defaults come from the one table in `domain.tunables`, so a worker built
directly agrees with one built by `App.worker` (which reads the environment).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from tidegate.domain.errors import ConfigurationError
from tidegate.domain.integers import check_whole
from tidegate.domain.jsonvalue import DEFAULT_MAX_PAYLOAD
from tidegate.domain.tunables import DEFAULT_MAX_WORKERS, MIN_LEASE, default_seconds, sweep_interval_for
from tidegate.engine.runtime.pools import ClaimPolicy

_DEFAULT_LEASE = default_seconds("TIDEGATE_LEASE_DURATION")

DrainMode = bool | Literal["due"]
"""When a worker exits by itself: never (False); once its queues hold no run queued, running or
waiting (True, `worker --drain`); or once nothing due now can be claimed and nothing is in flight
("due": a run scheduled later, or one its limits hold back, is left for later; `tidegate.testing`'s drain)."""


@dataclass(frozen=True)
class WorkerSettings:
    queues: tuple[str, ...]
    max_workers: int = DEFAULT_MAX_WORKERS
    drain: DrainMode = False
    lease_duration: float = _DEFAULT_LEASE
    poll_interval: float = default_seconds("TIDEGATE_POLL_INTERVAL")
    sweep_interval: float = sweep_interval_for(_DEFAULT_LEASE)  # App.worker derives it from the lease given
    cancel_grace: float = default_seconds("TIDEGATE_CANCEL_GRACE")
    shutdown_grace: float = default_seconds("TIDEGATE_SHUTDOWN_GRACE")
    claim_policy: ClaimPolicy = field(default_factory=ClaimPolicy)  # how workflow steps wait for pool slots
    fill_order: bool = False
    max_idle: float | None = None  # exit after this long with nothing to do
    overflow_interval: float = default_seconds("TIDEGATE_OVERFLOW_INTERVAL")
    max_payload: int = DEFAULT_MAX_PAYLOAD  # a larger result fails its attempt instead of being stored
    retention: float = default_seconds("TIDEGATE_RETENTION")  # finished runs older than this are deleted
    startup_wait: float = default_seconds("TIDEGATE_STARTUP_WAIT")  # an unreachable server is tried this long

    def __post_init__(self) -> None:
        if not self.queues:
            raise ConfigurationError("a worker needs at least one queue (no task is registered and none was given)")
        if self.drain not in (True, False, "due"):
            raise ConfigurationError(f"drain must be True, False or 'due', got {self.drain!r}")
        check_whole("max_workers", self.max_workers, 1, error=ConfigurationError)  # the registry's capacity
        if self.lease_duration < MIN_LEASE:
            raise ConfigurationError(f"lease duration must be at least 300ms, got {self.lease_duration}s")
