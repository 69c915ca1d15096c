"""The keywords of `@app.task`, `@app.workflow` and `@app.step`, written once.

Each decorator's signature is `**options: Unpack[...]` of one of these, so the type
checker and an editor see every keyword and its type, and the defaults live in one
place (`TASK_DEFAULTS`, `STEP_DEFAULTS`) instead of in each overload. A keyword no
TypedDict names is refused as Python refuses an unknown keyword.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any, TypedDict

from tidegate.app.definitions import task_definition
from tidegate.domain.model import TaskDefinition
from tidegate.domain.rate_costs import RateCost
from tidegate.domain.snooze import DEFAULT_MAX_SNOOZES
from tidegate.domain.unique import Unique
from tidegate.workflow import Executor


class SubmitKeywords(TypedDict, total=False):
    """A submit by name (`App.submit`, `App.submit_async`, `App.options_for`): the options a task's
    `options(...)` takes, the keys of once-per-key submits, and the caller's `connection`."""

    priority: int | None
    tags: Mapping[str, str] | None
    queue: str | None
    run_at: datetime | timedelta | None
    concurrency_key: str | None
    unique_key: str | None
    idempotency_key: str | None
    idempotency_ttl: str | float | None
    connection: Any
    rate_cost: int | None


class DefinitionKeywords(TypedDict, total=False):
    """What `@app.task(...)` and `@app.workflow(...)` both declare: the task's name (default:
    module.qualname), queue, priority, tags, attempts and backoff between them, timeout of one
    attempt, dispatch deadline, and how many times a run may snooze (`raise tidegate.Snooze`)."""

    name: str | None
    queue: str
    priority: int
    tags: Mapping[str, str] | None
    max_attempts: int
    retry_backoff: str | float
    timeout: str | float | None
    dispatch_deadline: str | float | None
    max_snoozes: int


class TaskKeywords(DefinitionKeywords, total=False):
    """`@app.task(...)`: a definition, `unique` (once per key for its runs) and `rate_cost` (what a
    start takes of its queue's rate: a whole number, or a function of the args; domain/rate_costs.py)."""

    unique: Unique | None
    rate_cost: RateCost


class WorkflowKeywords(DefinitionKeywords, total=False):
    """`@app.workflow(...)`: a definition, and the executor its steps run under."""

    executor: Executor | None


class StepKeywords(TypedDict, total=False):
    """`@app.step(...)`: its key, one pool (`pool` + `pool_slots`) or several (`pools`), the named rates
    it pays (`rates`: {name: cost}, taken with its pool slots, all or none), and its retries."""

    name: str | None
    pool: str | None
    pool_slots: int | None
    pools: Mapping[str, int] | None
    rates: Mapping[str, int] | None
    max_attempts: int
    retry_backoff: str | float


TASK_DEFAULTS = DefinitionKeywords(queue="default", priority=0, max_attempts=1, retry_backoff="1s")
STEP_DEFAULTS = StepKeywords(max_attempts=1, retry_backoff="1s")


def check_keywords(decorator: str, given: Mapping[str, Any], allowed: type) -> None:
    """Refuse a keyword the decorator does not take, as a signature would (a misspelt
    `max_attemps` must not be dropped silently)."""
    for key in given:
        if key not in allowed.__annotations__:  # a TypedDict's annotations include those it extends
            raise TypeError(f"{decorator}() got an unexpected keyword argument {key!r}")


def definition_of(function: Callable[..., Any], options: DefinitionKeywords) -> TaskDefinition:
    """A task's (or workflow's) validated definition from its decorator's keywords."""
    merged: dict[str, Any] = {**TASK_DEFAULTS, **options}
    return task_definition(
        function,
        merged.get("name"),
        merged["queue"],
        merged["priority"],
        merged.get("tags"),
        merged["max_attempts"],
        merged["retry_backoff"],
        merged.get("timeout"),
        merged.get("dispatch_deadline"),
        merged.get("max_snoozes", DEFAULT_MAX_SNOOZES),
    )
