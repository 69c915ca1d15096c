"""The records of step-level gates that cross the storage port: steps, pools, slot grants.

A workflow run is made of steps (DAG nodes and mapped items); each may hold
slots of pools and of its map's fan-out window. These plain frozen records
let the workflow executor, the PoolGuard, the adapters and the CLI share one
vocabulary without depending on how another layer stores things.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from tidegate.domain.durations import format_duration
from tidegate.domain.jsonvalue import JSONValue

POOL_PREFIX = "pool:"
FANOUT_PREFIX = "fanout:"
NAMED_RATE_SCOPE = "rate:@"  # a named rate's scope prefix (`domain.named_rates`)


class StepStatus(str, enum.Enum):
    PENDING = "pending"  # recorded (e.g. a map item up front), not taken yet
    RUNNING = "running"  # taken by an attempt (a map item in its window, or a started step)
    COMPLETED = "completed"  # a checkpoint: recovery never runs it again
    FAILED = "failed"

    @property
    def finished(self) -> bool:
        return self in (StepStatus.COMPLETED, StepStatus.FAILED)


@dataclass(frozen=True, slots=True)
class PoolWaiter:
    """A step waiting for slots of a pool: one of the steps its `pending` counts."""

    run_id: str
    step_key: str
    attempt: int  # the run's attempt the step waits in
    slots: int  # what it asks of this pool
    since: datetime | None  # when this wait began (its StepSlotWaiting event); None if that event is gone

    def document(self) -> dict[str, Any]:
        """A waiting step as `pools info --json` and `GET /api/v1/pools/{name}` show it."""
        return {
            "run_id": self.run_id,
            "step_key": self.step_key,
            "attempt": self.attempt,
            "slots": self.slots,
            "waiting_since": self.since,
        }


@dataclass(frozen=True, slots=True)
class PoolConfig:
    """A configured pool: at most `limit` slots held at once, each claim leased for `lease_seconds`."""

    name: str
    limit: int
    lease_seconds: float
    updated_at: datetime
    source: str | None = "override"  # whose value is in force: 'code' or 'override' (a live change)


@dataclass(frozen=True, slots=True)
class PoolStatus:
    """A pool as `pools list` shows it; `limit` None means never configured (unlimited)."""

    name: str
    limit: int | None
    lease_seconds: float | None
    claimed: int  # the sum of its live holder rows
    pending: int  # steps of live attempts waiting for it
    source: str | None = None  # where `limit` comes from: 'code', 'override' (a live change), None
    declared_limit: int | None = None  # the code's limit (shown beside an override)

    @property
    def configured(self) -> bool:
        return self.limit is not None

    def document(self) -> dict[str, Any]:
        """The pool as `pools list --json` and `GET /api/v1/pools` show it: one shape for both."""
        lease = self.lease_seconds
        return {
            "name": self.name,
            "limit": self.limit,
            "lease_seconds": lease,
            "lease_duration": None if lease is None else format_duration(lease),
            "claimed": self.claimed,
            "pending": self.pending,
            "source": self.source,
            "code_limit": self.declared_limit,
        }


@dataclass(frozen=True, slots=True)
class ScopeUse:
    """A scope that keeps a step waiting: `used` slots of `limit` are held by others."""

    scope: str
    used: int
    limit: int

    @property
    def name(self) -> str:
        """The pool's name for a pool scope, else the scope key itself (fan-out windows)."""
        return self.scope[len(POOL_PREFIX) :] if self.scope.startswith(POOL_PREFIX) else self.scope


@dataclass(frozen=True, slots=True)
class RateWait:
    """A named rate that holds a step back while its pools have room: which, its windows, and in
    how many seconds (the store's clock) every window allows the step's cost."""

    rate: str
    label: str  # '100/1s'
    retry_in: float

    def document(self) -> dict[str, Any]:
        return {"rate": self.rate, "rates": self.label, "retry_in": round(self.retry_in, 6)}


@dataclass(frozen=True, slots=True)
class SlotGrant:
    """What `acquire_slots` answered.

    `granted`: every scope asked for is held now (all or none). Otherwise
    `blocking` names the scopes without room. `lease_seconds` is the shortest
    lease of the pools held (renew every third of it); None when nothing held
    needs renewing of its own. `fenced_out`: the attempt no longer owns the
    run, so nothing was written. `rate_wait`: the pools had room but a named
    rate the step pays did not (nothing was taken: all or none); the step
    waits until then or a wake-up, holding no slot.
    """

    granted: bool
    blocking: list[ScopeUse] = field(default_factory=list)
    lease_seconds: float | None = None
    fenced_out: bool = False
    rate_wait: RateWait | None = None


@dataclass(frozen=True, slots=True)
class SlotRequest:
    """The slots one step asks for: {scope: slots}, the limits of its scopes that are not pools
    (a retried map item's fan-out window), and the cost it pays of each named rate ({name: cost}),
    taken with the slots, all or none."""

    step_key: str
    needs: Mapping[str, int]
    fixed_limits: Mapping[str, int] = field(default_factory=dict)
    rates: Mapping[str, int] = field(default_factory=dict)

    def waiting_for(self) -> dict[str, int]:
        """What its step row shows while it waits: its slots and its rates' scopes with their costs."""
        return {**self.needs, **{NAMED_RATE_SCOPE + name: cost for name, cost in self.rates.items()}}


@dataclass(frozen=True, slots=True)
class StepFinish:
    """What `finish_step` answered.

    `recorded` is False when the attempt was fenced out (nothing written).
    `handed` is the successor's grant when slots passed to it in the same
    transaction (None if it got none, or held its slots already); then
    `full` says whether another request like the successor's would be
    refused (so the next waiter need not ask before a wake-up). `shared`:
    a step of another run waits for one of the successor's pools, or one of
    them holds more than its limit, so this run should stop handing them on.
    """

    recorded: bool
    handed: SlotGrant | None = None
    full: bool = False
    shared: bool = False


@dataclass(frozen=True, slots=True)
class StepUpdate:
    """A step row to record: its state, and its output or error once finished."""

    step_key: str
    status: StepStatus
    map_key: str | None = None  # the map node a mapped item belongs to
    item_index: int | None = None
    output: JSONValue = None
    error: str | None = None
    details: Mapping[str, str] | None = None  # where it ran (a Kubernetes Job and pod), added to its event


@dataclass(frozen=True, slots=True)
class FinishStepRequest:
    """A finished step, as `Store.finish_step` takes it: record `step` for the attempt `fence` of
    `worker_id`, and hand its slots to `successor` (the run's next step waiting for them) when
    it fits; `successor_started` when the worker already handed them over in memory."""

    fence: tuple[str, int]  # (run id, attempt)
    worker_id: str
    step: StepUpdate
    successor: SlotRequest | None = None
    successor_started: StepUpdate | None = None


@dataclass(frozen=True, slots=True)
class StepRecord:
    """A step's checkpoint as stored; `waiting_for` is set while it waits for slots."""

    run_id: str
    step_key: str
    map_key: str | None
    item_index: int | None
    status: StepStatus
    output: JSONValue
    error: str | None
    attempt: int
    started_at: datetime | None
    finished_at: datetime | None
    waiting_for: dict[str, int] | None = None

    @property
    def shown_status(self) -> str:
        """The state a view shows. A map item taken into its window is stored running (the window
        slot is its) before its function starts; to an operator it is still queued, not running."""
        if self.status is StepStatus.RUNNING and self.started_at is None:
            return "queued"
        return self.status.value
