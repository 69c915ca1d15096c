"""The storage port: the domain verbs every adapter implements.

Each verb is one transaction in the adapter, so the guarantees (all-or-none
claims, fencing on (run id, attempt), at-least-once recovery) hold the same
way on SQLite and PostgreSQL. Query names in each adapter's queries.sql match
these method names. The behaviour suite in tests/ runs against both adapters.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from tidegate.domain.limits import QueueConfig, RunQueueConfig
from tidegate.domain.model import (
    CycleResult,
    EventRecord,
    HolderRecord,
    LimitChange,
    LimitOverride,
    NewRun,
    Outcome,
    RunRecord,
    RunStatus,
    SweepReport,
    TaskDefinition,
)

from tidegate.domain.scopes import Rules

Fence = tuple[str, int]  # (run id, attempt)


class Listener(Protocol):
    """A subscription to wake-ups; close it to stop the background listener."""

    def close(self) -> None: ...


class Store(Protocol):
    url: str

    # --- schema -----------------------------------------------------------
    def migrate(self) -> list[int]:
        """Apply pending migrations (serialized across processes); return the versions applied."""

    def schema_version(self) -> int:
        """The version recorded in the database (0 when none)."""

    def check_schema(self) -> None:
        """Raise SchemaError unless the schema is exactly the version this code needs."""

    # --- tasks --------------------------------------------------------------
    def register_tasks(self, tasks: Sequence[TaskDefinition]) -> None:
        """Upsert task defaults so that a submit by name needs no code."""

    def get_task(self, name: str) -> TaskDefinition | None: ...

    # --- workers ----------------------------------------------------------
    def register_worker(
        self, worker_id: str, capacity: int, queues: Sequence[str], fill_order: bool, ttl: float
    ) -> int:
        """Add (or refresh) this worker in the registry; return its stable rank (lowest free)."""

    def heartbeat_worker(self, worker_id: str, ttl: float) -> bool:
        """Extend the registry row; False if it was gone (the caller registers again)."""

    def deregister_worker(self, worker_id: str) -> None: ...

    def check_overflow(self, worker_id: str, queues: Sequence[str], interval: float) -> int | None:
        """Raise CapacityOverflow (once per interval) if eligible runs wait while every worker is full."""

    # --- limits -----------------------------------------------------------
    def register_limits(
        self, run_queue: RunQueueConfig | None, queues: Sequence[QueueConfig], implied_queues: Sequence[str]
    ) -> None:
        """Persist code declarations (None leaves the stored run-queue config alone); bump the rules version."""

    def rules(self) -> Rules:
        """Declared limits plus live overrides, as the claim sees them."""

    def set_limit(self, target: str, limit: int | None) -> LimitChange:
        """Persist a live override (validated by the caller), with a LimitChanged event; wakes claimers."""

    def reset_limit(self, target: str) -> LimitChange:
        """Remove a live override: the code's limit is in force again."""

    def limit_overrides(self) -> list[LimitOverride]: ...

    def scope_usage(self) -> dict[str, int]:
        """Slots in use per scope: the sum of its holder rows."""

    def scope_holders(self, scope: str) -> list[HolderRecord]: ...

    def list_queued(self, queue: str | None = None, limit: int = 100) -> list[RunRecord]:
        """Queued runs in claim order (priority desc, then queue time)."""

    def queue_position(self, run_id: str) -> tuple[int, int]:
        """(1-based position in its queue's claim order, runs queued in that queue)."""

    # --- runs ---------------------------------------------------------------
    def enqueue(self, runs: Sequence[NewRun]) -> None:
        """Store runs as queued (with RunQueued events), all or none, and wake workers.

        Raises AdmissionRejected, storing nothing, if a ceiling (max_active) would be passed."""

    def cycle(
        self,
        worker_id: str,
        queues: Sequence[str],
        starts: Sequence[Fence],
        outcomes: Sequence[Outcome],
        claim_limit: int,
        lease_seconds: float,
    ) -> CycleResult:
        """One worker round trip: record starts and outcomes (fenced, releasing their scopes),
        then claim up to `claim_limit`: every scope of each claimed run is taken in the same
        transaction (holder rows) or the run is skipped with its block reason recorded."""

    def renew_leases(self, worker_id: str, held: Sequence[Fence], lease_seconds: float) -> list[Fence]:
        """Extend the leases of attempts this worker still holds; return those it lost."""

    def hand_back(self, worker_id: str, held: Sequence[Fence]) -> list[str]:
        """Return unfinished attempts to the queue without counting them (graceful shutdown)."""

    def sweep(self, sweeper_id: str, interval: float) -> SweepReport | None:
        """Re-queue or fail runs whose lease expired; None if another sweeper holds the turn."""

    def cancel_run(self, run_id: str) -> RunStatus:
        """Cancel a queued run now, or ask the worker of a running one; return the status after."""

    def pending_count(self, queues: Sequence[str]) -> int:
        """Runs still queued or running in these queues (for `worker --drain`)."""

    # --- reading ------------------------------------------------------------
    def get_run(self, run_id: str) -> RunRecord | None: ...

    def list_runs(
        self, status: RunStatus | None = None, queue: str | None = None, limit: int = 100
    ) -> list[RunRecord]: ...

    def run_events(self, run_id: str) -> list[EventRecord]: ...

    def status_counts(self, queue: str | None = None) -> dict[RunStatus, int]:
        """How many runs are in each status (every status present, zeros included)."""

    # --- wake-ups -----------------------------------------------------------
    def listen(self, callback: Callable[[], None]) -> Listener:
        """Call `callback` (from a background thread) whenever runs may be claimable or cancelable."""

    def close(self) -> None: ...
