"""The storage port: the domain verbs every adapter implements.

Each verb is one transaction in the adapter, so the guarantees (all-or-none
claims, fencing on (run id, attempt), at-least-once recovery) hold the same
way on SQLite and PostgreSQL. Query names in each adapter's .sql files match
these method names. The behaviour suite in tests/ runs against both adapters.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from types import MappingProxyType
from typing import Protocol

from tidegate.domain.backpressure import Pace
from tidegate.domain.blocking import QueuedShape
from tidegate.domain.children import ChildRecord, TriggerAnswer, TriggerRequest
from tidegate.domain.doctor import DatabaseFacts
from tidegate.domain.limits import QueueConfig, RunQueueConfig
from tidegate.domain.model import (
    CycleRequest,
    CycleResult,
    EventRecord,
    HolderRecord,
    LimitChange,
    LimitOverride,
    NewRun,
    QueueCounts,
    RunRecord,
    RunStatus,
    SweepReport,
    TaskDefinition,
    TaskRegistration,
    WorkerRecord,
    WorkerRegistration,
)
from tidegate.domain.named_rates import NamedRate
from tidegate.domain.rates import Rate, RateStates
from tidegate.domain.retention import PruneReport
from tidegate.domain.schedules import Firing, NewSchedule, ScheduleRecord
from tidegate.domain.scopes import Rules
from tidegate.domain.steps import (
    FinishStepRequest,
    PoolConfig,
    PoolStatus,
    PoolWaiter,
    SlotGrant,
    SlotRequest,
    StepFinish,
    StepRecord,
    StepUpdate,
)
from tidegate.domain.unique import Admission
from tidegate.storage.submits import Submits

Fence = tuple[str, int]  # (run id, attempt)

# Every verb whose commit can let a run (or a waiting step) in, and what it lets in. The façade
# opens the wake-up of each and the adapter sends it at the verb's commit (`storage/shared/wakes.py`),
# so `peek_cycle`, the worker's gate and a worker's passing over of its own wake-ups lose none.
# tests/contract/test_wake_table_contract.py wakes a listener on another store with each, and fails
# for a verb outside this table that frees capacity.
WAKES: Mapping[str, str] = MappingProxyType(
    {
        "enqueue": "new queued runs",
        "enqueue_unique": "new queued runs (a duplicate stores none: a spare wake-up at worst)",
        "cycle": "outcomes free their scopes and may end an awaited child; a full fill-order claim leaves work",
        "hand_back": "handed-back runs are queued again and their scopes freed",
        "report_cost": "a lowered cost gives rate tokens back",
        "sweep": "lost runs re-queued, leaked holders and expired step slots freed, waiting parents resumed",
        "cancel_run": "a canceled run frees its scopes (a waiting one its held slots)",
        "trigger_children": "children queued; a wait releases the parent's slots",
        "retry_run": "a run queued again",
        "deregister_worker": "higher-ranked workers of the fill order may claim",
        "register_limits": "declared limits may be raised",
        "set_limit": "a raised limit",
        "reset_limit": "the code's limit, maybe higher than the override",
        "set_queue_paused": "a resumed queue's runs",
        "declare_pool": "a raised pool limit lets waiting steps in",
        "set_pool_limit": "a raised pool limit lets waiting steps in",
        "reset_pool_limit": "the code's pool limit, maybe higher than the override",
        "release_slots": "a step's freed pool slots (and its named rates' tokens, refunded before its start)",
        "declare_named_rate": "a raised named rate lets waiting steps in sooner",
        "set_named_rate": "a raised named rate lets waiting steps in sooner",
        "reset_named_rate": "the code's named rate, maybe higher than the override",
        "record_steps": "a finished step frees the slots it held",
        "finish_step": "a finished step's slots that stayed free",
        "fire_schedule": "the runs of fired ticks",
        "set_schedule_paused": "a resumed schedule is due",
    }
)


class Listener(Protocol):
    """A subscription to wake-ups; close it to stop the background listener."""

    def close(self) -> None: ...


class SchemaVerbs(Protocol):
    """The database's schema: migrations and the version check."""

    def migrate(self) -> list[int]:
        """Apply pending migrations (serialized across processes); return the versions applied."""

    def schema_version(self) -> int:
        """The version recorded in the database (0 when none)."""

    def check_schema(self) -> None:
        """Raise SchemaError unless the schema is exactly the version this code needs."""


class RunVerbs(Protocol):
    """Tasks, submits and the reads of one run or queue."""

    def register_tasks(self, tasks: Sequence[TaskDefinition], worker_id: str | None = None) -> None:
        """Upsert task defaults and parameters so that a submit by name needs no code; `worker_id`:
        the worker registering them (remembered with the time; None leaves the last one as it was)."""

    def get_task(self, name: str) -> TaskDefinition | None: ...

    def list_tasks(self) -> list[TaskRegistration]:
        """Every registered task, by name, with when and by which worker it was last registered."""

    def enqueue(self, runs: Sequence[NewRun]) -> None:
        """Store runs as queued (with RunQueued events), all or none, and wake workers.

        Raises AdmissionRejected, storing nothing, if a ceiling (max_active) would be passed."""

    def pending_count(self, queues: Sequence[str]) -> int:
        """Runs still queued, running or waiting in these queues (for `worker --drain`)."""

    def get_run(self, run_id: str) -> RunRecord | None: ...

    def run_events(self, run_id: str) -> list[EventRecord]: ...

    def status_counts(self, queue: str | None = None) -> dict[RunStatus, int]:
        """How many runs are in each status (every status present, zeros included)."""

    def list_queued(self, queue: str | None = None, limit: int = 100) -> list[RunRecord]:
        """Queued runs in claim order (priority desc, then queue time)."""

    def queue_position(self, run_id: str) -> tuple[int, int]:
        """(1-based position in its queue's claim order, runs queued in that queue)."""


class UniqueVerbs(Protocol):
    """Submits that may carry a `unique` claim: one run per key."""

    def enqueue_unique(self, runs: Sequence[NewRun]) -> list[Admission]:
        """`enqueue` for a batch whose runs may carry a `unique` claim (domain/unique.py), one
        transaction: each keyed run takes its key, or meets the run holding it (returned as a
        duplicate; a still-queued holder takes its args when the claim says replace or debounce).

        Race-free across connections. Raises DuplicateRun (claim "raise") or AdmissionRejected,
        storing nothing."""


class BrowseVerbs(Protocol):
    """Runs listed for operators, a page at a time."""

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


class TelemetryVerbs(Protocol):
    """The event stream and the counts a scrape reads."""

    def events_after(self, after: int, limit: int) -> list[EventRecord]:
        """Every event with an id above `after`, oldest first, at most `limit`: a stream resumes here."""

    def latest_events(self, kind: str, limit: int) -> list[EventRecord]:
        """The newest `limit` events of type `kind`, newest first: LimitChanged (live limits, pools,
        pauses) is the audit history, CapacityOverflow the overflow signals raised."""

    def last_event_id(self) -> int:
        """The newest event's id (0 when there is none): where a stream of new events starts."""

    def queued_shapes(self) -> list[QueuedShape]:
        """Queued runs grouped by queue, partition and tags (the shape that decides their scopes),
        each with its count: what the counts of blocked runs classify (`domain.blocking.tally`)."""

    def run_counts(self) -> dict[tuple[str, RunStatus], int]:
        """Runs per (queue, status), only the pairs that have any."""


class RetryVerbs(Protocol):
    """An operator's retry of an ended run."""

    def retry_run(self, run_id: str) -> RunRecord:
        """Give a failed or canceled run a new attempt: queued again now with one more attempt
        in its budget, a RunRetriedManually event, workers woken; return it as stored.

        Raises RunNotRetryable (nothing changed) in any other status, RunNotFound for an unknown id."""


class ActivityVerbs(Protocol):
    """What workers are doing and how fast runs go."""

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

    def run_pace(
        self,
        within: float,
        *,
        queue: str | None = None,
        partition: str | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> Pace:
        """How long the runs matching every filter take (the store's clock): those that started and
        ended in the last `within` seconds, those running now, and the last few that ended before
        (`domain.backpressure.Pace`): what the ETA of `queue why` and the admission hint go by."""


class ClaimVerbs(Protocol):
    """A worker's cycle: reports and claims in one transaction."""

    def cycle(self, request: CycleRequest) -> CycleResult:
        """One worker round trip: record starts and outcomes (fenced, releasing their scopes),
        then claim up to `request.claim_limit` (past `request.plain_limit` unless the claim is free,
        only runs `domain.admission.admit` lets wait ahead): every
        scope of each claimed run is taken in the same transaction (its holders) or the run is skipped
        with its block reason recorded."""


class LookVerbs(Protocol):
    """The lock-free look before a cycle."""

    def peek_cycle(self, worker_id: str, queues: Sequence[str]) -> CycleResult | None:
        """Before a cycle that reports nothing: its answer (nothing claimed, the cancel requests),
        when a read without the claim's locks proves no run of `queues` can be admitted now (every
        open queue closed by a full scope all its runs need: domain/claim_plan.py); None when it
        cannot, and the caller cycles. Every change that could admit a run wakes listeners after
        it commits, so a worker that cleared its wake-up before asking loses none."""


class LeaseVerbs(Protocol):
    """Leases, hand-backs and the sweep's recovery."""

    def renew_leases(self, worker_id: str, held: Sequence[Fence], lease_seconds: float) -> list[Fence]:
        """Extend the leases of attempts this worker still holds; return those it lost."""

    def hand_back(self, worker_id: str, held: Sequence[Fence]) -> list[str]:
        """Return unfinished attempts to the queue without counting them (graceful shutdown); an
        attempt that never started gives its rate charge back (`domain.rates.refund`)."""

    def report_cost(self, worker_id: str, fence: Fence, cost: int) -> bool:
        """Correct the rate charge of this worker's running attempt to `cost` units: the difference
        is taken, or given back as far as unspent, at once (`domain.rates.correct`). False, with
        nothing changed, when the attempt is no longer this worker's."""

    def sweep(self, sweeper_id: str, interval: float) -> SweepReport | None:
        """Re-queue or fail runs whose lease expired and free step holders whose pool lease
        expired (every holder of such a step, StepSlotReleased); None if another sweeper
        holds the turn."""


class WorkerVerbs(Protocol):
    """The worker registry."""

    def register_worker(self, registration: WorkerRegistration) -> int:
        """Add (or refresh) this worker in the registry; return its stable rank (lowest free)."""

    def heartbeat_worker(self, worker_id: str, ttl: float) -> bool:
        """Extend the registry row; False if it was gone (the caller registers again)."""

    def deregister_worker(self, worker_id: str) -> None: ...

    def check_overflow(self, worker_id: str, queues: Sequence[str], interval: float) -> int | None:
        """Raise CapacityOverflow (once per interval) if eligible runs wait while every worker is full."""


class LimitVerbs(Protocol):
    """Declared limits, live overrides and scope usage."""

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
        """Slots in use per run-level scope: the sum of its runs' holders (step slots: `pools`)."""

    def rate_states(self) -> RateStates:
        """The rate states that may still hold a start back (TAT after now), with the database's
        time of the read: what `domain.blocking` asks whether a rated run may start now."""

    def scope_holders(self, scope: str) -> list[HolderRecord]: ...


class QueueVerbs(Protocol):
    """Queue counts and pauses."""

    def queue_counts(self) -> dict[str, QueueCounts]:
        """Per queue with queued or running runs: queued and running."""

    def set_queue_paused(self, queue: str, paused: bool) -> bool:
        """Pause (no run of it is claimed; submits still queue) or resume a declared queue, persisted
        with the rules (their version moves) and audited (LimitChanged); True if it changed.

        Raises QueueNotFound for a queue no declaration names."""


class ChildVerbs(Protocol):
    """Children, waits and cancels (a cancel reaches a run's children)."""

    def trigger_children(self, request: TriggerRequest) -> TriggerAnswer:
        """Store the children a running attempt triggers (positions already stored are checked,
        NonDeterministicReplay, and answered, not stored twice); with `wait`, if some awaited
        child is unfinished, end the attempt `waiting`, releasing slots per domain/waits.py
        (RecursiveWaitDeadlock / WaitDeadlock refuse it, storing nothing). With `wait_any` the
        wait is on any of `children`: none if one has ended already, else the run is queued again
        as soon as one of its awaited children ends (a workflow's sliding window), not when all
        have. AttemptFencedOut if the attempt is no longer this worker's."""

    def run_children(self, run_id: str) -> list[ChildRecord]:
        """The run's children in call order."""

    def cancel_run(self, run_id: str) -> RunStatus:
        """Cancel a queued or waiting run now, or ask the worker of a running one, and the same for
        its unfinished children linked to it (not `abandon` ones); return the status after."""


class PoolVerbs(Protocol):
    """Step pools: their limits and holders."""

    def declare_pool(self, pool: str, limit: int, lease_seconds: float) -> PoolConfig:
        """The code's limit of a pool (validated by the caller): in force unless a live override is;
        a LimitChanged event only when the value in force moved. Returns the value in force."""

    def set_pool_limit(self, pool: str, limit: int, lease_seconds: float) -> PoolConfig:
        """A live override of a pool's limit (validated by the caller): it wins over the code's until
        `reset_pool_limit`; audited (LimitChanged); wakes waiters."""

    def reset_pool_limit(self, pool: str) -> PoolConfig | None:
        """Drop a pool's live override (audited): the code's value is in force again; None when the
        code declares none (the pool is unconfigured, unlimited)."""

    def pools(self) -> list[PoolStatus]:
        """Configured pools, plus unconfigured ones a step asked for (ever), holds or waits for, by name."""

    def pool_holders(self, pool: str) -> list[HolderRecord]:
        """The holders of a pool's slots, oldest claim first."""

    def pool_waiters(self, pool: str) -> list[PoolWaiter]:
        """The steps waiting for a pool's slots (those `pools` counts pending), longest waiting first."""


class NamedRateVerbs(Protocol):
    """Named rates (`domain.named_rates`): windows declared by name, paid by the steps that name them."""

    def declare_named_rate(self, name: str, windows: tuple[Rate, ...]) -> NamedRate:
        """The code's windows of a rate (validated by the caller): in force unless a live override is;
        audited (LimitChanged) only when the windows in force move; wakes waiting steps."""

    def set_named_rate(self, name: str, windows: tuple[Rate, ...]) -> NamedRate:
        """A live override of a rate's windows (validated by the caller): it wins over the code's until
        `reset_named_rate`; audited (LimitChanged); wakes waiting steps."""

    def reset_named_rate(self, name: str) -> NamedRate | None:
        """Drop a rate's live override (audited): the code's windows again; None when the code
        declares none (the rate is gone: a step naming it fails with RateNotFound)."""

    def named_rates(self) -> list[NamedRate]:
        """Every declared rate by name, with the steps of live attempts waiting for it."""


class StepVerbs(Protocol):
    """Steps of a running attempt: slots, checkpoints, map items.

    Step holders live in tidegate_holders (scope `pool:NAME` or `fanout:RUN/MAP`, holder
    `RUN/STEPKEY`); every write is fenced on the run's (id, attempt): a stale attempt's acquire,
    renew, release or record changes nothing."""

    def acquire_slots(self, fence: Fence, worker_id: str, request: SlotRequest) -> SlotGrant:
        """Take every scope of `request.needs` ({scope: slots}) for its step, or none, in one transaction.

        Limits of pool scopes come from tidegate_pools (an unconfigured pool is
        unlimited and gets one PoolUnconfigured event per run); `request.fixed_limits`
        gives the others (fan-out windows). Raises PoolRequestTooLarge when a
        pool's limit is below the slots asked. A grant writes StepSlotClaimed;
        the first refusal writes StepSlotWaiting and marks the step as waiting.
        Re-asking for what this step already holds is a grant.

        `request.rates` ({named rate: cost}) are charged in the same transaction
        once the pools have room, all or none: refused by a rate, nothing is
        taken and the grant's `rate_wait` says when it allows the step. Raises
        RateNotFound for a rate nobody declared, RateCostTooLarge for a cost above
        a window's burst. The charge is kept with the step (a refund, see `release_slots`)."""

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
        """Delete this step's pool holders (StepSlotReleased) and wake waiters; a step that never
        started gives its named rates' charge back (what of it is unspent)."""

    def record_steps(self, fence: Fence, steps: Sequence[StepUpdate]) -> bool:
        """Upsert step rows, each with its StepStarted/Completed/Failed event, in one transaction (a
        map's items recorded up front); False if fenced out.

        A completed step is a checkpoint and is never overwritten. Recording a
        step completed or failed also frees every slot it still holds (its
        fan-out window slot included)."""

    def finish_step(self, request: FinishStepRequest) -> StepFinish:
        """`record_steps` of a finished step that may hand its slots to `successor`, in one transaction.

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
        (no event: recording it RUNNING writes StepStarted when it starts).
        None when the window is full, nothing is left, or the attempt is fenced out."""


class ScheduleVerbs(Protocol):
    """Cron schedules: declarations, firings, pauses."""

    def register_schedules(self, schedules: Sequence[NewSchedule]) -> None:
        """Upsert declared schedules. A stored cursor is kept unless the cron expression or time zone
        changed (then it starts at `first_fire_at`); a pause is never undone by a declaration."""

    def list_schedules(self) -> list[ScheduleRecord]:
        """Every stored schedule, by name."""

    def due_schedules(self) -> tuple[datetime, list[ScheduleRecord]]:
        """The store's time and the schedules not paused whose next tick is due by then."""

    def fire_schedule(self, firing: Firing) -> list[str]:
        """Fire a plan's ticks in one transaction: each tick's row (unique per schedule and tick), its
        run stored as `enqueue` stores one (admission included) with a ScheduleFired event, and the
        cursor moved to `firing.next_fire_at`; return the run ids.

        Fires nothing (and returns []) if the cursor is no longer `firing.expected_next`, the
        schedule is paused or gone, or a tick's row exists: another worker fired it. Raises
        AdmissionRejected, storing nothing, if a ceiling refuses the runs."""

    def set_schedule_paused(self, name: str, paused: bool, next_fire_at: datetime | None = None) -> bool:
        """Pause or resume (moving the cursor to `next_fire_at` if given); True if it changed.

        Raises ScheduleNotFound for an unknown name."""

    def remove_schedule(self, name: str) -> None:
        """Delete a stored schedule (its fired runs stay). Raises ScheduleNotFound for an unknown name."""


class RetentionVerbs(Protocol):
    """Deleting what has aged out."""

    def prune_runs(self, older_than: float, limit: int) -> PruneReport:
        """Delete at most `limit` finished runs (completed, failed, canceled) that ended more than
        `older_than` seconds ago (the store's clock), with their events and step rows, and at most
        `limit` fired schedule ticks as old, in one short transaction; never a queued or running run."""


class HealthVerbs(Protocol):
    """What only the database can tell the doctor."""

    def doctor_facts(self, retention: float) -> DatabaseFacts:
        """What only the database can say to `tidegate doctor`: the store's time and its own clock
        (without a test clock's offset; None where it has none), its connection limits, and the
        finished runs older than `retention` seconds the sweep would delete, still stored."""


class Listening(Protocol):
    """Wake-ups, the submits from outside the store's own sync calls, and the store's lifetime."""

    url: str

    @property
    def submits(self) -> Submits:
        """Async submits and those in the caller's transaction (storage/submits.py)."""

    def listen(self, callback: Callable[[], None], own: str | None = None) -> Listener:
        """Call `callback` (from a background thread) whenever runs may be claimable or cancelable.

        `own`, a worker id: the wake-up of that worker's own `cycle` that claims may be passed
        over (its claim and cancel read saw all that its commit announces); every other one,
        a cycle of it that claims nothing included, still calls."""

    def close(self) -> None: ...


class Store(
    SchemaVerbs,
    RunVerbs,
    UniqueVerbs,
    BrowseVerbs,
    TelemetryVerbs,
    RetryVerbs,
    ActivityVerbs,
    ClaimVerbs,
    LookVerbs,
    LeaseVerbs,
    WorkerVerbs,
    LimitVerbs,
    QueueVerbs,
    ChildVerbs,
    PoolVerbs,
    NamedRateVerbs,
    StepVerbs,
    ScheduleVerbs,
    RetentionVerbs,
    HealthVerbs,
    Listening,
    Protocol,
):
    """The whole port: every role, as the faces and the worker use it. An adapter's aggregates each
    implement one role (declared, so mypy checks them); `storage/shared/facade.py` composes them."""


VERBS: frozenset[str] = frozenset(
    name
    for role in Store.__mro__[1:]
    if Protocol in role.__bases__
    for name, member in vars(role).items()
    if callable(member) and not name.startswith("_")
)
