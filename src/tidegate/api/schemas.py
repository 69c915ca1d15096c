"""The HTTP API's request and response bodies, each a named schema in the OpenAPI document.

Requests are strict (no coercion of "5" into 5, no unknown fields) so that a
client's mistake is answered with a 422 naming the field, not guessed at.
The domain still owns every rule about values (names, priorities, sizes):
these models check types and shapes only.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, field_validator

from tidegate.domain.model import RunStatus

MAX_BATCH = 1000  # runs in one POST /runs/batch: larger sets go in several batches


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class SubmitRequest(_Strict):
    """One run to submit; options left out take the task's registered defaults."""

    task: StrictStr = Field(description="Task name, as registered by its app.")
    args: dict[str, Any] = Field(default_factory=dict, description="Keyword arguments (JSON).")
    queue: StrictStr | None = Field(default=None, description="Queue (default: the task's).")
    priority: StrictInt | None = Field(default=None, description="Higher runs first (default: the task's).")
    tags: dict[str, StrictStr] | None = Field(default=None, description="Tags, added to the task's.")
    concurrency_key: StrictStr | None = Field(default=None, description="Partition key for concurrency limits.")
    run_at: datetime | None = Field(default=None, strict=False, description="Run no sooner than this time (RFC 3339).")
    unique_key: StrictStr | None = Field(
        default=None,
        description="The key of the task's `Unique` rule (or of the default one): a run holding it is answered "
        "`200` with `duplicate: true` instead of a new run.",
    )
    idempotency_key: StrictStr | None = Field(
        default=None,
        description="Every submit with this key gets the run the first one made, for `idempotency_ttl` after it "
        "(unless that run failed or was canceled): `200` with `duplicate: true`.",
    )
    idempotency_ttl: StrictStr | None = Field(
        default=None, description="How long an idempotency key is kept (`24h`, `7d`; default a day, at most 30 days)."
    )
    rate_cost: StrictInt | None = Field(
        default=None,
        description="What this run takes of its queue's rate, a whole number from 1 (default: the task's `rate_cost`, "
        "or what its function of the args answers).",
    )

    @field_validator("run_at", mode="before")
    @classmethod
    def _rfc3339_text(cls, value: Any) -> Any:
        """A time is written as text: a bare number would be read as seconds since 1970."""
        if value is not None and not isinstance(value, str):
            raise ValueError("run_at must be an RFC 3339 date-time string")
        return value


class BatchRequest(_Strict):
    """Runs stored together: all of them, or none."""

    runs: list[SubmitRequest] = Field(min_length=1, max_length=MAX_BATCH)


class RunLinks(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    self_: str = Field(alias="self")
    events: str
    cancel: str


class SubmittedRun(BaseModel):
    """A run just stored: queued (or due later); or, with `duplicate`, the run that already held the
    submit's unique or idempotency key (as it is now: its own fields and status)."""

    id: str
    task: str
    queue: str
    partition: str
    priority: int
    tags: dict[str, str]
    status: RunStatus
    links: RunLinks
    duplicate: bool = Field(
        default=False, description="The submit met a run holding its key: this is that run, nothing was stored."
    )


class SubmittedBatch(BaseModel):
    runs: list[SubmittedRun]


class Step(BaseModel):
    """A workflow step's checkpoint."""

    key: str
    map_key: str | None
    item_index: int | None
    status: str
    output: Any
    error: str | None
    attempt: int
    started_at: datetime | None
    finished_at: datetime | None
    waiting_for: dict[str, int] | None


class Run(BaseModel):
    """A run as stored: status, args, result or error, attempts, timings, block reason."""

    id: str
    task: str
    queue: str
    partition: str
    status: RunStatus
    priority: int
    args: dict[str, Any]
    tags: dict[str, str]
    concurrency_key: str | None
    attempt: int
    max_attempts: int = Field(
        description="The budget in force: `declared_max_attempts` plus every uncharged attempt and manual retry."
    )
    declared_max_attempts: int = Field(description="The `max_attempts` the task or the submit gave the run.")
    uncharged_attempts: dict[str, int] = Field(
        description="Attempts that did not count against the budget, by cause: `child_wait` (it ended waiting "
        "on children), `worker_shutdown` (handed back by a worker shutting down), `lost_worker` (lost with its "
        "worker and not charged to it), `snooze` (the task raised `tidegate.Snooze`)."
    )
    manual_retries: int = Field(description="Retries by an operator (`POST /runs/{id}/retry`), one attempt each.")
    submitted_at: datetime
    scheduled_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    worker_id: str | None
    lease_expires_at: datetime | None
    cancel_requested: bool
    result: Any
    error: str | None
    block_reason: list[dict[str, Any]] | None = Field(
        description="A queued run: why it waits now, as `queue why` says (None: ready). Its queue's pause "
        '(`{"scope": "queue:NAME", "reason": "paused", "detail": ...}`) first, then each full scope '
        "it needs with `used` and `limit`; a rate (`rate:QUEUE[/PARTITION]`) also with `per` (s), "
        "`next_allowed_in` (s) and `detail` (`next start allowed in 2.4s`)."
    )
    suspect: bool
    stuck: bool = Field(
        description="Running past its lease (`lease_expires_at`): its worker stopped renewing it, and it holds "
        "its slots until a sweep (`POST /api/v1/sweep`) re-queues it."
    )
    last_heartbeat: datetime | None = Field(
        description="A stuck run: its worker's last heartbeat; null when not stuck or the registry forgot the worker."
    )
    worker_heartbeat_lost_s: float | None = Field(
        description="A running run whose worker missed two heartbeats (it heartbeats every third of its lease; "
        "the store's clock): seconds since its last one. The worker is killed, hung or cut off: the run only "
        "reads running until its lease expires (then `stuck`) and a sweep re-queues it. Null otherwise."
    )
    links: RunLinks


class Child(BaseModel):
    """A child run, in its parent's call order (`index`)."""

    id: str
    index: int
    task: str
    queue: str
    status: RunStatus
    awaited: bool = Field(description="Its parent waits for it (trigger_and_wait); false: fire and forget.")
    linked: bool = Field(
        default=False,
        description="A child of a task declared `unique=` whose key another run held when the parent triggered "
        "it: `id` is that run (a submitted run, or another parent's child), which this parent did not create, "
        "waits on and replays, but never cancels with itself; `task` is the parent's call. False: its own child.",
    )


class RunDetail(Run):
    steps: list[Step]
    parent_id: str | None = Field(default=None, description="The run that triggered it; null for a submitted run.")
    root_id: str | None = Field(default=None, description="The top of its tree of runs; null for a submitted run.")
    depth: int = 0
    children: list[Child] = Field(default_factory=list, description="The runs it triggered, in call order.")


class RunPage(BaseModel):
    """One page of runs, newest first; pass `next_cursor` as `cursor` for the next (null: no more)."""

    runs: list[Run]
    next_cursor: str | None


class Event(BaseModel):
    id: int
    run_id: str
    step_key: str | None
    type: str
    metadata: dict[str, Any]
    at: datetime


class EventList(BaseModel):
    events: list[Event]


class CancelResult(BaseModel):
    """The run's status after the cancel: canceled if it was queued, else its worker was told."""

    id: str
    status: RunStatus
    cancel_requested: bool


class Probe(BaseModel):
    status: str


class Error(BaseModel):
    """Every error: a stable code, one line of explanation, and the request field at fault if any."""

    error: str
    detail: str
    field: str | None = None


class AdmissionError(Error):
    """429: the backlog is at its ceiling; retry after `retry_after` seconds (also the Retry-After header)."""

    retry_after: int
