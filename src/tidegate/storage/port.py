"""The storage port: the domain verbs every adapter implements.

Each verb is one transaction in the adapter, so the guarantees (all-or-none
claims, fencing on (run id, attempt), at-least-once recovery) hold the same
way on SQLite and PostgreSQL. Query names in each adapter's .sql files match
these method names. The behaviour suite in tests/ runs against both adapters.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
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
    QueueCounts,
    RunRecord,
    RunStatus,
    SweepReport,
    TaskDefinition,
    WorkerRecord,
)
from tidegate.domain.scopes import Rules
from tidegate.domain.steps import PoolConfig, PoolStatus, SlotGrant, SlotRequest, StepFinish, StepRecord, StepUpdate

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
        """Slots in use per run-level scope: the sum of its runs' holder rows (step slots: `pools`)."""

    def scope_holders(self, scope: str) -> list[HolderRecord]: ...

    def list_queued(self, queue: str | None = None, limit: int = 100) -> list[RunRecord]:
        """Queued runs in claim order (priority desc, then queue time)."""

    # --- queues (operator controls) ---------------------------------------
    def queue_counts(self) -> dict[str, QueueCounts]:
        """Per queue with queued or running runs: queued, running, and queued with a block reason."""

    def set_queue_paused(self, queue: str, paused: bool) -> bool:
        """Pause (no run of it is claimed; submits still queue) or resume a declared queue, persisted
        with the rules (their version moves) and audited (LimitChanged); True if it changed.

        Raises QueueNotFound for a queue no declaration names."""

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
        """Re-queue or fail runs whose lease expired and free step holders whose pool lease
        expired (every holder of such a step, StepSlotReleased); None if another sweeper
        holds the turn."""

    def cancel_run(self, run_id: str) -> RunStatus:
        """Cancel a queued run now, or ask the worker of a running one; return the status after."""

    def pending_count(self, queues: Sequence[str]) -> int:
        """Runs still queued or running in these queues (for `worker --drain`)."""

    # --- reading ------------------------------------------------------------
    def get_run(self, run_id: str) -> RunRecord | None: ...

    def list_runs(
        self, status: RunStatus | None = None, queue: str | None = None, limit: int = 100
    ) -> list[RunRecord]: ...

    def page_runs(
        self,
        *,
        status: RunStatus | None = None,
        queue: str | None = None,
        task: str | None = None,
        tags: Mapping[str, str] | None = None,
        before: str | None = None,
        limit: int = 100,
    ) -> list[RunRecord]:
        """Runs newest first (by id) matching every filter (`tags`: each key=value carried), after `before`."""

    def run_events(self, run_id: str) -> list[EventRecord]: ...

    def status_counts(self, queue: str | None = None) -> dict[RunStatus, int]:
        """How many runs are in each status (every status present, zeros included)."""

    # --- operators ------------------------------------------------------------
    def retry_run(self, run_id: str) -> RunRecord:
        """Give a failed or canceled run a new attempt: queued again now with one more attempt
        in its budget, a RunRetriedManually event, workers woken; return it as stored.

        Raises RunNotRetryable (nothing changed) in any other status, RunNotFound for an unknown id."""

    def list_workers(self) -> list[WorkerRecord]:
        """Every registered worker (live ones first, by rank) with its busy count and heartbeat age."""

    def finished_count(
        self,
        within: float,
        *,
        queue: str | None = None,
        partition: str | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> int:
        """Runs that were claimed and ended in the last `within` seconds (the store's clock), matching
        every filter (`tags`: each key=value carried): the recent rate at which a scope frees slots."""

    # --- telemetry ------------------------------------------------------------
    def events_after(self, after: int, limit: int) -> list[EventRecord]:
        """Every event with an id above `after`, oldest first, at most `limit`: a stream resumes here."""

    def last_event_id(self) -> int:
        """The newest event's id (0 when there is none): where a stream of new events starts."""

    def blocked_counts(self) -> dict[str, int]:
        """Queued runs per scope their stored block reason names (a run counts for each scope)."""

    def run_counts(self) -> dict[tuple[str, RunStatus], int]:
        """Runs per (queue, status), only the pairs that have any."""

    # --- pools and steps ------------------------------------------------------
    # Step holders live in tidegate_holders (scope `pool:NAME` or `fanout:RUN/MAP`,
    # holder `RUN/STEPKEY`); every write is fenced on the run's (id, attempt): a
    # stale attempt's acquire, renew, release or record changes nothing.

    def set_pool_limit(self, pool: str, limit: int, lease_seconds: float) -> PoolConfig:
        """Upsert a pool (validated by the caller), with a LimitChanged event; wakes waiters."""

    def pools(self) -> list[PoolStatus]:
        """Configured pools, plus unconfigured ones that are held or waited for, by name."""

    def pool_holders(self, pool: str) -> list[HolderRecord]:
        """The holders of a pool's slots, oldest claim first."""

    def acquire_slots(
        self,
        fence: Fence,
        worker_id: str,
        step_key: str,
        needs: Mapping[str, int],
        fixed_limits: Mapping[str, int],
    ) -> SlotGrant:
        """Take every scope of `needs` ({scope: slots}) for this step, or none, in one transaction.

        Limits of pool scopes come from tidegate_pools (an unconfigured pool is
        unlimited and gets one PoolUnconfigured event per run); `fixed_limits`
        gives the others (fan-out windows). Raises PoolRequestTooLarge when a
        pool's limit is below the slots asked. A grant writes StepSlotClaimed;
        the first refusal writes StepSlotWaiting and marks the step as waiting.
        Re-asking for what this step already holds is a grant."""

    def acquire_many(
        self, fence: Fence, worker_id: str, requests: Sequence[SlotRequest], strict: bool = False
    ) -> list[SlotGrant] | None:
        """`acquire_slots` for many steps in one transaction, judged in order, each seeing the grants
        before it: a step that fits is granted, one that does not is marked waiting.

        For steps that queue behind another step of their run asking for the
        same slots: each is seen waiting (`pools list` pending) with one write
        for all. A request no limit can satisfy raises PoolRequestTooLarge if
        `strict`, else it is answered not granted and nothing is written for
        it. None if fenced out."""

    def renew_slots(self, fence: Fence, step_key: str) -> bool:
        """Extend each pool holder of this step by its pool's lease (StepSlotRenewed); False if lost."""

    def release_slots(self, fence: Fence, step_key: str) -> None:
        """Delete this step's pool holders (StepSlotReleased) and wake waiters."""

    def record_step(self, fence: Fence, step: StepUpdate) -> bool:
        """Upsert a step row and write its StepStarted/Completed/Failed event; False if fenced out."""

    def record_steps(self, fence: Fence, steps: Sequence[StepUpdate]) -> bool:
        """`record_step` for many in one transaction (a map's items recorded up front).

        A completed step is a checkpoint and is never overwritten. Recording a
        step completed or failed also frees every slot it still holds (its
        fan-out window slot included)."""

    def finish_step(
        self,
        fence: Fence,
        worker_id: str,
        step: StepUpdate,
        successor: SlotRequest | None = None,
        successor_started: StepUpdate | None = None,
    ) -> StepFinish:
        """`record_step` of a finished step that may hand its slots to `successor`, in one transaction.

        The successor is the run's next step waiting for the same slots.
        Without `successor_started`, the store decides: the successor is
        granted (as `acquire_slots` would, StepSlotClaimed included) if it fits
        once the finished step's slots are freed, unless `shared` (a step of
        another live run waits for one of its pools, or one is over its
        limit): a run hands its slots to itself only while nobody else wants
        them. With `successor_started`, the worker already handed the slots
        over in memory (it does so only while the last answer was not
        `shared`): the finished step's holders of those scopes become the
        successor's (the sum in use does not change), with StepSlotReleased
        and StepSlotClaimed, and the successor is recorded running. Waiters
        are woken only for slots that stayed free."""

    def run_steps(self, run_id: str) -> list[StepRecord]:
        """A run's step checkpoints, in the order they were first recorded."""

    def next_map_item(self, fence: Fence, worker_id: str, map_key: str, window: int) -> StepRecord | None:
        """Atomically take the next item of a map if its window (scope `fanout:RUN/MAP`) has room.

        The lowest-index item that is pending, or was taken by an earlier
        attempt and not finished, gets its window holder and is marked running
        (no event: record_step(RUNNING) writes StepStarted when it starts).
        None when the window is full, nothing is left, or the attempt is fenced out."""

    # --- wake-ups -----------------------------------------------------------
    def listen(self, callback: Callable[[], None]) -> Listener:
        """Call `callback` (from a background thread) whenever runs may be claimable or cancelable."""

    def close(self) -> None: ...
