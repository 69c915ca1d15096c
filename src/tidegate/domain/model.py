"""The records that cross the storage port: runs, outcomes, events, tasks.

They are plain frozen dataclasses so adapters, the worker and the CLI share
one vocabulary and no layer depends on how another stores things.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from tidegate.domain.attempts import AttemptCount
from tidegate.domain.jsonvalue import JSONValue
from tidegate.domain.keys import CheckedUnique, RunKey
from tidegate.domain.parameters import TaskParameters
from tidegate.domain.snooze import DEFAULT_MAX_SNOOZES


class RunStatus(str, enum.Enum):
    QUEUED = "queued"
    RUNNING = "running"
    WAITING = "waiting"  # a parent waiting for its children: no worker, no lease (issue 13)
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELED = "canceled"

    @property
    def finished(self) -> bool:
        return self in FINISHED_STATUSES


FINISHED_STATUSES = frozenset({RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELED})


class EventType(str, enum.Enum):
    RUN_QUEUED = "RunQueued"
    RUN_DEQUEUED = "RunDequeued"
    RUN_STARTED = "RunStarted"
    RUN_COMPLETED = "RunCompleted"
    RUN_FAILED = "RunFailed"
    RUN_RETRIED = "RunRetried"
    RUN_RETRIED_MANUALLY = "RunRetriedManually"
    RUN_SNOOZED = "RunSnoozed"
    RUN_CANCELED = "RunCanceled"
    RUN_REQUEUED = "RunRequeued"
    RUN_BLOCKED = "RunBlocked"
    LIMIT_CHANGED = "LimitChanged"
    SLOT_LEAK_REPAIRED = "SlotLeakRepaired"
    STEP_SLOT_WAITING = "StepSlotWaiting"
    STEP_SLOT_CLAIMED = "StepSlotClaimed"
    STEP_SLOT_RENEWED = "StepSlotRenewed"
    STEP_SLOT_RELEASED = "StepSlotReleased"
    STEP_STARTED = "StepStarted"
    STEP_COMPLETED = "StepCompleted"
    STEP_FAILED = "StepFailed"
    POOL_UNCONFIGURED = "PoolUnconfigured"
    SCHEDULE_FIRED = "ScheduleFired"


class OutcomeKind(str, enum.Enum):
    """How an attempt ended, as the worker reports it."""

    COMPLETED = "completed"
    FAILED = "failed"  # retried if `retry_delay` is set, else final
    CANCELED = "canceled"
    SNOOZED = "snoozed"  # `raise Snooze(delay)`: queued again after `retry_delay`, not charged (domain/snooze.py)


@dataclass(frozen=True, slots=True)
class TaskDefinition:
    """A task's defaults, persisted so that submit-by-name works without the code."""

    name: str
    queue: str
    priority: int = 0
    tags: dict[str, str] = field(default_factory=dict)
    max_attempts: int = 1
    retry_backoff: float = 1.0
    timeout: float | None = None
    dispatch_deadline: float | None = None  # seconds a run may wait queued before failing "capacity:"
    max_snoozes: int = DEFAULT_MAX_SNOOZES  # snoozes a run may take before the next one fails it
    parameters: TaskParameters | None = None  # what its args must be; None: registered without a description
    unique: CheckedUnique | None = None  # once per key for its runs (domain/unique.py)
    # Cost units a start takes of its queue's rate: a whole number, or a function of the args
    # (domain/rate_costs.py); None: a function, read from the store by a process without the code.
    rate_cost: int | Callable[..., Any] | None = 1


@dataclass(frozen=True, slots=True)
class TaskRegistration:
    """A task as registered in the store: its defaults, when any app last wrote them, and the
    worker that last did (None when only submitters or servers registered it)."""

    definition: TaskDefinition
    updated_at: datetime
    worker_id: str | None = None
    worker_seen_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class NewRun:
    """A run about to be stored by submit; every field is already validated."""

    id: str
    task: str
    queue: str
    partition: str  # '' unless the queue is partitioned or a concurrency key was given
    args: dict[str, JSONValue]
    priority: int
    tags: dict[str, str]
    concurrency_key: str | None
    max_attempts: int
    retry_backoff: float
    timeout: float | None
    delay: float  # seconds from the store's now until the run is due
    deadline: float | None = None  # seconds from submission until it fails "capacity:" if still queued
    unique: RunKey | None = None  # once per key (domain/unique.py): the store takes the key or meets its holder
    trace_context: str | None = None  # the submit's span (W3C traceparent), which the run's attempts join
    rate_partition: str = ""  # the partition of its queue's rate it is charged to ('' when one budget)
    rate_cost: int = 1  # the cost units it takes of every window of its queue's rate (domain/rate_costs.py)


@dataclass(frozen=True, slots=True)
class ClaimedRun:
    """A run a worker has claimed: everything needed to execute one attempt."""

    id: str
    task: str
    queue: str
    args: dict[str, JSONValue]
    attempt: int
    max_attempts: int
    retry_backoff: float
    timeout: float | None
    suspect: bool = False  # rescued from a lost worker: its start is recorded before its body runs
    queued_seconds: float = 0.0  # how long it waited, due and queued, before this claim (the store's clock)
    # a child run, or a keyed one a parent may have linked to (a unique child): its end may resume
    # a waiting parent; True when not known
    has_parent: bool = True
    trace_context: str | None = None  # as stored at submit: each attempt's span joins that trace
    snoozes: int = 0  # times it snoozed so far (`raise Snooze`): capped by its task's `max_snoozes`
    # Taken ahead of a free slot under a rate: the seconds from its claim's sending it must start
    # within, or be recharged (`CycleRequest.recharge`); None: no deadline
    lead: float | None = None

    @property
    def fence(self) -> tuple[str, int]:
        """(run id, attempt): every write about this attempt is fenced on it."""
        return (self.id, self.attempt)

    def with_lead(self, lead: float | None) -> ClaimedRun:
        """This run once charged again with a fresh `lead` (None: it starts as any claimed run)."""
        return dataclasses.replace(self, lead=lead)


@dataclass(frozen=True, slots=True)
class Outcome:
    """How one attempt ended; applied by the store only if the fence still holds."""

    run_id: str
    attempt: int
    kind: OutcomeKind
    result: JSONValue = None
    error: str | None = None
    retry_delay: float | None = None  # FAILED: seconds until the next attempt; SNOOZED: the snooze's delay
    overloaded: bool = False  # SNOOZED only: the task said its downstream is overloaded (`Snooze(overloaded=True)`)
    # False only when the claim said the run has no parent: then its end resumes no one, and the
    # store's cycle skips looking for a parent to resume. True (the safe default) when not known.
    has_parent: bool = True


@dataclass(frozen=True, slots=True)
class CycleRequest:
    """One worker cycle, as `Store.cycle` takes it: report `starts` (attempts the worker began) and
    `outcomes` (attempts that ended), then claim up to `claim_limit` runs of `queues` (in the
    worker's order) with leases of `lease_seconds`. A claim limit of 0 only reports."""

    worker_id: str
    queues: Sequence[str]
    starts: Sequence[tuple[str, int]]  # (run id, attempt)
    outcomes: Sequence[Outcome]
    claim_limit: int
    lease_seconds: float
    # Of `claim_limit`, how many are runs claimed a cycle ahead of the worker's free slots, which
    # wait on the worker for a slot. A free claim (`ClaimPlan.free`: no limit, cap or fair order
    # applies) takes them as any run; any other takes `claim_limit - claim_ahead` and, past that,
    # only runs `admit` lets wait (a rate charges them only with a lead, no per-worker cap, fair
    # order or suspect group counts them, and at most half the room of every scope they need),
    # none when no slot is free; a worker in a fill order takes none ahead.
    claim_ahead: int = 0
    # Runs taken ahead under a rate whose lead ran out before a slot freed (`ClaimedRun.lead`), in
    # the order they would start: charged again (`CycleResult.recharged`, `rate_charger.recharge`).
    # The first `recharge_at_once` have a free slot each (the worker counts them in flight, so no
    # claim takes those slots): those may be charged to start at once.
    recharge: Sequence[tuple[str, int]] = ()
    recharge_at_once: int = 0

    @property
    def plain_limit(self) -> int:
        """The most a claim that is not free takes for the worker's free slots."""
        return max(0, self.claim_limit - self.claim_ahead)


@dataclass(frozen=True, slots=True)
class CycleResult:
    """What one worker cycle (record outcomes, claim more) returns."""

    claimed: list[ClaimedRun]
    fenced_out: list[tuple[str, int]]  # outcomes the store refused: the attempt was taken over
    cancel_requested: list[tuple[str, int]]  # this worker's attempts a user asked to cancel
    next_due_in: float | None  # seconds until the next queued run falls due, when the claim ran dry
    more: bool = False  # the claim took runs and its read came back full: claim again at once
    # Seconds until a run a rate held back may start (the earliest, measured on the store's clock
    # when the claim decided): the worker sleeps until then rather than polling for a token.
    next_allowed_in: float | None = None
    # Of `CycleRequest.recharge`, each run recharged and its fresh lead (s; None: no deadline, it starts
    # at once); the rest wait on the worker for the next try (`next_allowed_in` says when)
    recharged: dict[str, float | None] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RunRecord:
    """A run as shown to users and operators."""

    id: str
    task: str
    queue: str
    partition: str
    status: RunStatus
    priority: int
    args: dict[str, JSONValue]
    tags: dict[str, str]
    concurrency_key: str | None
    attempt: int
    max_attempts: int
    submitted_at: datetime
    scheduled_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    worker_id: str | None
    lease_expires_at: datetime | None
    cancel_requested: bool
    result: JSONValue
    error: str | None
    # What the last claim that read and skipped it recorded (scope, used, limit): history, and how a
    # claim knows the reason changed (RunBlocked). Why it waits now is `domain.blocking.verdict`.
    block_reason: list[dict[str, Any]] | None
    suspect: bool = False  # rescued from a lost worker: it runs in a group of suspects (domain/recovery.py)
    resumed: bool = False  # queued again after a wait, not yet claimed: first in its queue's claim order
    parent_id: str | None = None  # the run that triggered it (a child run)
    root_id: str | None = None  # the top of its tree; None for a run nobody triggered
    depth: int = 0
    wait_released: list[str] | None = None  # while waiting: the run-level scopes it released
    wait_kept: list[str] | None = None  # while waiting: the run-level scopes it keeps
    wait_any: bool = False  # while waiting: queued again when any awaited child ends (map_children's window)
    # What grew `max_attempts` beyond the declared budget, by cause (domain/attempts.py).
    child_waits: int = 0
    worker_shutdowns: int = 0
    lost_workers: int = 0
    manual_retries: int = 0
    rate_partition: str = ""  # the partition of its queue's rate it is charged to ('' when one budget)
    snoozes: int = 0  # attempts that ended `raise Snooze(...)`: uncharged, and capped by `max_snoozes`

    @property
    def attempts(self) -> AttemptCount:
        """Its attempt, budget and uncharged attempts, as every face words them (`attempts.describe`)."""
        return AttemptCount(
            self.attempt, self.max_attempts, self.child_waits, self.worker_shutdowns, self.lost_workers,
            self.manual_retries, self.snoozes,
        )  # fmt: skip

    @property
    def declared_max_attempts(self) -> int:
        """The `max_attempts` the run was given, before any uncharged attempt or manual retry grew it."""
        return self.attempts.declared

    @property
    def uncharged_attempts(self) -> dict[str, int]:
        return self.attempts.uncharged_by_cause()


@dataclass(frozen=True, slots=True)
class HolderRecord:
    """One holder row: `slots` of `scope` held by a run (or a step of it)."""

    scope: str
    holder: str
    run_id: str
    attempt: int
    worker_id: str | None
    slots: int
    claimed_at: datetime
    expires_at: datetime

    @property
    def step_key(self) -> str | None:
        """The step holding these slots (holder `RUN/STEPKEY`); None for a run's own holder."""
        _, slash, key = self.holder.partition("/")
        return key if slash else None

    def document(self) -> dict[str, Any]:
        """A pool holder as `pools info --json` and `GET /api/v1/pools/{name}` show it."""
        return {
            "run_id": self.run_id,
            "step_key": self.step_key,
            "attempt": self.attempt,
            "worker_id": self.worker_id,
            "slots": self.slots,
            "claimed_at": self.claimed_at,
            "lease_expires_at": self.expires_at,
        }


@dataclass(frozen=True, slots=True)
class WorkerRegistration:
    """A worker joining the registry, as `Store.register_worker` takes it: `capacity` runs at once
    from `queues`, in the fill order or not, registered for `ttl` seconds between heartbeats."""

    worker_id: str
    capacity: int
    queues: Sequence[str]
    fill_order: bool
    ttl: float


@dataclass(frozen=True, slots=True)
class WorkerRecord:
    """A worker in the registry, as operators see it; `live` while its heartbeat keeps it registered."""

    id: str
    rank: int
    capacity: int
    busy: int  # runs it is running now
    queues: list[str]
    fill_order: bool
    started_at: datetime
    heartbeat_at: datetime
    heartbeat_age: float  # seconds since its last heartbeat, by the store's clock
    live: bool
    lease_seconds: float  # its lease (and registry) time to live: it heartbeats every third of it


def host_and_pid(worker_id: str) -> tuple[str, int | None]:
    """A worker id `HOST:PID:NONCE` (as `worker/loop.py` makes it) split; an id of another shape is all host, no pid."""
    parts = worker_id.rsplit(":", 2)
    if len(parts) == 3 and parts[1].isdigit():
        return parts[0], int(parts[1])
    return worker_id, None


@dataclass(frozen=True, slots=True)
class LimitOverride:
    target: str
    limit: int | None  # None: unlimited
    version: int
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class QueueCounts:
    """A queue's runs now: queued and running (how many are blocked: `engine.operators.queues.blocked`)."""

    queued: int = 0
    running: int = 0


@dataclass(frozen=True, slots=True)
class LimitChange:
    """What `set_limit` / `reset_limit` did: the effective limit before and after."""

    target: str
    old: int | None
    new: int | None
    version: int


@dataclass(frozen=True, slots=True)
class EventRecord:
    id: int
    run_id: str
    step_key: str | None
    type: str
    metadata: dict[str, Any]
    at: datetime


@dataclass(frozen=True, slots=True)
class SweepReport:
    """What one sweep repaired; empty when nothing had expired."""

    requeued: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    leaks_repaired: int = 0
    step_slots_expired: int = 0  # step holders whose pool lease lapsed (freed, all of a step's at once)
    resumed: list[str] = field(default_factory=list)  # waiting parents whose children had all ended (a backstop)
    # lost runs whose verdict the database refused (id -> its error): left as they were, the others recovered
    unapplied: dict[str, str] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(
            self.requeued
            or self.failed
            or self.leaks_repaired
            or self.step_slots_expired
            or self.resumed
            or self.unapplied
        )
