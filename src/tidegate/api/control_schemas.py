"""The operator controls' bodies (queues, pools, limits), each a named schema in the OpenAPI document.

Requests are strict like the run routes' (schemas.py): no coercion, no
unknown fields. Values are judged by the engine and the domain (limits,
targets, pool names, durations), never here, so the API and the CLI refuse
the same input with the same words.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


# --- queues ----------------------------------------------------------------------------------------


class QueueLimits(BaseModel):
    """A queue's limits: `global_limit` is the one in force (a live override wins over the code's)."""

    global_limit: int | None = Field(description="Running runs at most, per partition, across workers (null: none).")
    code_global_limit: int | None = Field(description="The code's declaration, whatever override is in force.")
    local_limit: int | None = Field(description="Per worker, per partition.")
    max_workers: int | None = Field(description="Runs of this queue one worker runs at most.")
    max_active: int | None = Field(description="Admission ceiling: queued and running runs at most.")
    partitioned_by: list[str] = Field(
        description="`kind` and/or arg names (`*`: all args); empty: one lane (or one per concurrency key)."
    )
    ordering: str
    dispatch_deadline_seconds: float | None


class Queue(BaseModel):
    """A declared queue now. While it is paused none of its runs starts; submits still queue."""

    name: str
    paused: bool
    limits: QueueLimits
    queued: int
    running: int
    blocked: int = Field(description="Queued runs a full scope or the pause holds back now (all queued while paused).")


class QueueList(BaseModel):
    queues: list[Queue]


# --- pools -----------------------------------------------------------------------------------------


class Pool(BaseModel):
    """A pool: `limit` null means never configured (unlimited)."""

    name: str
    limit: int | None
    lease_seconds: float | None
    lease_duration: str | None = Field(description="The lease as a duration (`30s`, `5m`).")
    claimed: int = Field(description="Slots held now: the sum of its holder rows.")
    pending: int = Field(description="Steps of live attempts waiting for it.")
    source: str | None = Field(
        default=None,
        description="Where `limit` comes from: `code` (App.set_pool_limit), `override` (a live change, "
        "kept until reset), null (unconfigured).",
    )
    code_limit: int | None = Field(default=None, description="The limit the code declares (null: none).")


class PoolList(BaseModel):
    pools: list[Pool]


class PoolHolder(BaseModel):
    """Slots of the pool held by one step of a run."""

    run_id: str
    step_key: str | None
    attempt: int
    worker_id: str | None
    slots: int
    claimed_at: datetime
    lease_expires_at: datetime


class PoolWaiting(BaseModel):
    """A step of a running run waiting for slots of the pool (one of those `pending` counts)."""

    run_id: str
    step_key: str
    attempt: int
    slots: int = Field(description="The slots it asks of this pool.")
    waiting_since: datetime | None = Field(description="When its wait began; null if its event was pruned.")


class PoolDetail(Pool):
    holders: list[PoolHolder]
    waiting: list[PoolWaiting] = Field(description="The steps waiting for its slots, longest waiting first.")


class PoolUpdate(_Strict):
    """Create a pool or change it, live: waiting steps are woken at once."""

    limit: StrictInt = Field(description="Slots at most in use at once; 0 pauses the pool.")
    lease_duration: StrictStr | None = Field(
        default=None, description="How long a claim lasts unless renewed (`30s`, `5m`); omitted: kept (new pool: 5m)."
    )


# --- limits ----------------------------------------------------------------------------------------


class LimitOverride(BaseModel):
    """A live limit: wins over the code's until reset; `limit` null is unlimited."""

    target: str
    limit: int | None
    version: int
    updated_at: datetime


class LimitInForce(BaseModel):
    """One limit target, a row of the table `tidegate limits list` and the dashboard show: the limit
    in force, the code's, and the slots in use."""

    target: str
    limit: int | None
    code_limit: int | None
    used: int | None = Field(
        description="Slots held now; null where nothing is counted: a family (`tag:KEY`) or a partitioned "
        "queue, whose members are scopes of their own."
    )
    live: bool = Field(description="A live override sets `limit`.")
    version: int | None = Field(description="The live override's version; null when the code's limit is in force.")
    parent: str | None = Field(description="The row this one belongs to: a partition's queue, a tag value's `tag:KEY`.")
    declared: str = Field(description="Where the code declares it: `code`, `code override` (a partition's own), or ''.")
    note: str = Field(description="What the row covers, as the CLI's `set by` column says it.")
    adaptive: str = Field(
        default="",
        description="An adaptive queue's (or partition's) effective limit and why it last moved, e.g. "
        "`adaptive 4 of 20 (overloaded)`; '' for any other limit. A live override still wins.",
    )
    per: float | None = Field(
        default=None,
        description="A rate window (`rate:...@PER`): its length in seconds; `used` is then the cost units its "
        "stored state counts now and `limit` the most in any window of that length. Null for any other limit.",
    )
    burst: int | None = Field(default=None, description="A rate window: the most cost taken at one instant, in force.")


class Ceiling(BaseModel):
    """An admission ceiling (`max_active`): a submit past it is refused (429)."""

    queue: str | None = Field(description="The queue it counts; null: all queues.")
    max_active: int
    active: int = Field(description="Runs counted now: queued, running and waiting.")


class Limits(BaseModel):
    limits: list[LimitInForce]
    ceilings: list[Ceiling]
    overrides: list[LimitOverride]


class LimitUpdate(_Strict):
    """A live limit on `target` (global, queue:NAME, queue:NAME/PARTITION, tag:KEY=VALUE, tag:KEY), or on
    a rate's window (rate:QUEUE[/PARTITION]@PER, rate:tag:KEY[=VALUE]@PER, a named rate's rate:@NAME@PER;
    @PER optional for one window)."""

    target: StrictStr
    limit: StrictInt | None = Field(
        description="A whole number >= 1; null (or -1) for unlimited (not for a rate window: a rate is never lifted)."
    )
    dry_run: StrictBool = Field(default=False, description="Change nothing: say what the change would do.")


class LimitResult(BaseModel):
    """A change made (`version` set), or previewed (`dry_run`: the counts set, nothing changed)."""

    target: str
    old: int | None
    new: int | None
    dry_run: bool
    version: int | None = Field(description="The override's version after the change; null for a dry run.")
    unblocked: int | None = Field(description="Dry run: queued runs that could start under the new limit only.")
    blocked: int | None = Field(description="Dry run: queued runs that could start under the old limit only.")
    considered: int | None = Field(description="Dry run: queued runs looked at (the first in claim order).")
    waiting: int | None = Field(
        default=None, description="Dry run of a named rate's window: the steps waiting for the rate now."
    )


class LimitResets(BaseModel):
    """The overrides removed (none when the target had no override)."""

    reset: list[LimitResult]
