"""Response bodies of the registry and recovery routes (tasks, schedules, sweep), each a named schema.

Kept apart from the run and operator schemas so each module stays one screen
of models; the fields are those `tidegate tasks list --json`, `schedules list
--json` and `sweep --json` print, read from the same engine and store verbs.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field


class Parameter(BaseModel):
    """One parameter a run's args may fill, as the task's code declares it."""

    name: str
    kind: Literal["positional_only", "positional_or_keyword", "keyword_only"] = Field(
        description="How Python binds it; args are given by name, so a positional-only one cannot be filled."
    )
    required: bool
    types: list[str] = Field(description="The JSON types its annotation accepts (`any`: not restricted).")
    annotation: str = Field(description="As written in the code, for people.")
    default: str | None = Field(description="The default's repr, for people; null when required.")


class Parameters(BaseModel):
    parameters: list[Parameter] = Field(description="In signature order.")
    extra_keywords: bool = Field(description="It takes **kwargs: args it does not name are accepted.")


class LimitMet(BaseModel):
    """A limit every run of the task meets with its default options, as a claim or a submit applies it."""

    name: str = Field(
        description="A scope key (`global`, `queue:api`, `tag:env=prod`) or a setting (`max_active(api)`)."
    )
    kind: Literal["scope", "admission", "worker"] = Field(
        description="scope: a slot held while running; admission: counted at submit; worker: per worker."
    )
    label: str = Field(description="As an operator names it, e.g. 'max_active of queue api'.")
    limit: int
    per: str | None = Field(description="A partitioned queue's limit applies per partition: by what; else null.")


class Task(BaseModel):
    """A registered task: its defaults, what its args must be, the limits its runs meet, its last worker."""

    name: str = Field(description="The name to submit by.")
    queue: str
    paused: bool = Field(description="Its queue is paused: its runs queue but none starts.")
    priority: int
    tags: dict[str, str]
    max_attempts: int
    timeout: float | None = Field(description="Seconds an attempt may run; null: no limit.")
    signature: str | None = Field(description="`x: int, *, y: str = 'a'`; null when registered without one.")
    parameters: Parameters | None = Field(description="Null when registered by a tidegate that did not record them.")
    limits: list[LimitMet]
    worker: str | None = Field(description="The worker that last registered it; null when only submitters did.")
    worker_seen_at: datetime | None
    registered_at: datetime = Field(description="When any app last wrote its defaults.")


class TaskList(BaseModel):
    """Every registered task, by name."""

    tasks: list[Task]


class Schedule(BaseModel):
    """A stored schedule: its task, cron expression and time zone, its next and last fire."""

    name: str
    task: str
    cron: str
    timezone: str
    args: dict[str, Any]
    missed: Literal["skip", "catch_up"] = Field(description="What a worker back from downtime does with missed ticks.")
    paused: bool
    next_fire_at: datetime | None = Field(description="The next tick it fires; null while paused.")
    last_fire_at: datetime | None
    last_run_id: str | None = Field(description="The run its last tick submitted.")


class ScheduleList(BaseModel):
    """Every stored schedule, by name."""

    schedules: list[Schedule]


class ScheduleChange(Schedule):
    """The schedule after a pause or resume; `changed` is false when it was already so."""

    changed: bool


class ScheduleRemoved(BaseModel):
    """A schedule deleted (its fired runs stay); a worker whose code still declares it stores it again."""

    name: str
    removed: Literal[True]


class SweepResult(BaseModel):
    """What one sweep recovered. `swept` is false when a worker's sweeper held the turn (nothing done: ask again)."""

    swept: bool
    requeued: list[str] = Field(description="Runs past their lease given another attempt (queued again).")
    failed: list[str] = Field(
        description="Runs past their lease with no attempt left, or past their dispatch deadline."
    )
    resumed: list[str] = Field(description="Waiting parents whose children had all ended.")
    leaks_repaired: int = Field(description="Slot holders of runs no longer running, freed.")
    step_slots_expired: int = Field(description="Step slot holders whose pool lease lapsed, freed.")
    unapplied: dict[str, str] = Field(
        description="Lost runs whose rescue the database refused (run id: its error), left as they were; "
        "the others were recovered."
    )
