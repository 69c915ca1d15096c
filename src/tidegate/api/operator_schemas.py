"""Response bodies of the operator routes (why, retry, queue, workers), each a named schema.

Kept apart from `schemas.py` (runs and submits) so each module stays one
screen of models; both feed the same OpenAPI document.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from tidegate.domain.model import RunStatus


class Holder(BaseModel):
    """Who holds slots of a full layer: a run, or one step of a workflow run (`step_key`)."""

    run_id: str
    step_key: str | None
    slots: int
    worker_id: str | None
    claimed_at: datetime
    expires_at: datetime


class Layer(BaseModel):
    """One gate the run needs, checked now the way a claim checks it."""

    layer: str = Field(description="global, queue, tag, rate, workers (the live workers serving the queue) or pool.")
    scope: str = Field(description="The scope key, as `tidegate limits set` takes it (`workers:QUEUE` is not a limit).")
    label: str
    used: int
    limit: int
    slots: int = Field(description="What the run (or its waiting step) asks of it.")
    ok: bool = Field(description="False: this layer holds the run back.")
    per: float | None = Field(None, description="A rate: its period in seconds (`used` of `limit` per `per`).")
    next_allowed_in: float | None = Field(
        None, description="A rate that holds the run back: seconds until its next start is allowed."
    )
    holders: list[Holder] = Field(description="The holders of a full layer (empty when ok).")


class Why(BaseModel):
    """Why a run is not running yet: its place, every layer it needs, and when it should get them."""

    id: str
    status: RunStatus
    queue: str
    priority: int
    position: int | None = Field(description="1-based place in its queue's claim order; null unless queued.")
    queued_in_queue: int | None
    scheduled_at: datetime = Field(description="Not claimed before this time.")
    layers: list[Layer] = Field(
        description="A queued run's scopes and its workers; a running workflow's pools its waiting steps ask for."
    )
    blocked_by: list[str] = Field(description="The scopes of the layers that hold it back.")
    eta_seconds: float | None = Field(
        description="Seconds until the blocking layers should have room: the runs ahead that need them end, "
        "as many at a time as each layer's limit, each taking the mean duration of the layer's recent ends "
        "(before any: the runs in flight so far, or the layer's history); null when nothing blocks or no run "
        "of a blocking layer has run yet."
    )
    waiting_for: str | None = Field(
        default=None,
        description="A waiting parent: the children it waits for, e.g. '3 children (1 completed, 2 running)'.",
    )
    resumes_when: Literal["any", "all"] | None = Field(
        default=None,
        description="A waiting parent: queued again when any awaited child ends (a map_children window) "
        "or once all of them have ended.",
    )
    released: list[str] = Field(default_factory=list, description="A waiting parent: the scopes it released meanwhile.")
    kept: list[str] = Field(
        default_factory=list, description="A waiting parent: the scopes it keeps (they still count)."
    )
    paused: bool = Field(
        description="Its queue is paused: nothing of it starts until the queue is resumed, whatever the layers say."
    )


class RetryResult(BaseModel):
    """A failed or canceled run, queued again with one more attempt in its budget."""

    id: str
    status: RunStatus
    attempt: int = Field(description="Attempts used so far; the next claim starts attempt + 1.")
    max_attempts: int


class QueuedRun(BaseModel):
    position: int = Field(description="1-based place in its queue's claim order.")
    id: str
    task: str
    queue: str
    priority: int
    queued_since: datetime = Field(description="When it became claimable: its submit, retry or run_at.")
    block_reason: list[dict[str, Any]] | None = Field(
        description="A queued run: why it waits now, as `queue why` says (None: ready). Its queue's pause "
        '(`{"scope": "queue:NAME", "reason": "paused", "detail": ...}`) first, then each full scope '
        "it needs with `used` and `limit`; a rate (`rate:QUEUE[/PARTITION]`) also with `per` (s), "
        "`next_allowed_in` (s) and `detail` (`next start allowed in 2.4s`)."
    )


class QueuePage(BaseModel):
    """Queued runs in claim order (priority, then age); `total` counts every queued run matching the filter."""

    runs: list[QueuedRun]
    total: int


class Worker(BaseModel):
    """A worker in the registry, as every claim and the sweeper see it (`tidegate workers list`)."""

    id: str = Field(description="`HOST:PID:NONCE`.")
    host: str = Field(description="From its id; an id of another shape is all host.")
    pid: int | None = Field(description="From its id; null when the id does not carry one.")
    rank: int
    capacity: int
    busy: int
    queues: list[str]
    fill_order: bool
    live: bool = Field(description="False once its heartbeat lapsed (until the sweep forgets it).")
    started_at: datetime
    heartbeat_at: datetime
    heartbeat_age: float = Field(description="Seconds since its last heartbeat, by the store's clock.")


class WorkerList(BaseModel):
    workers: list[Worker]
