"""Declarations checked when they are made: a task's defaults and a queue's limits.

`@app.task`, `@app.workflow` and `app.queue` all come through here, so a bad
name, priority or duration fails when the module is imported, not when a run
first meets it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tidegate.domain import names
from tidegate.domain.adaptive import Adaptive
from tidegate.domain.durations import parse_duration
from tidegate.domain.errors import ConfigurationError
from tidegate.domain.limits import Concurrency, Ordering, Partition, QueueConfig
from tidegate.domain.model import TaskDefinition
from tidegate.domain.rates import Rate, check_rates
from tidegate.domain.snooze import DEFAULT_MAX_SNOOZES, check_max_snoozes


def task_definition(
    function: Callable[..., Any],
    name: str | None,
    queue: str,
    priority: int,
    tags: Mapping[str, str] | None,
    max_attempts: int,
    retry_backoff: str | float,
    timeout: str | float | None,
    dispatch_deadline: str | float | None,
    max_snoozes: int = DEFAULT_MAX_SNOOZES,
) -> TaskDefinition:
    """A task's validated defaults (shared by tasks and workflows); named after its function by default."""
    definition = TaskDefinition(
        name=names.check_name("task", name or f"{function.__module__}.{function.__qualname__}"),
        queue=names.check_name("queue", queue),
        priority=names.check_priority(priority),
        tags=names.check_tags(tags),
        max_attempts=names.check_max_attempts(max_attempts),
        retry_backoff=parse_duration(retry_backoff, name="retry_backoff"),
        timeout=None if timeout is None else parse_duration(timeout, name="timeout"),
        dispatch_deadline=_optional_duration(dispatch_deadline, "dispatch_deadline"),
        max_snoozes=check_max_snoozes(max_snoozes),
    )
    if definition.timeout is not None and definition.timeout <= 0:
        raise ConfigurationError(f"timeout must be positive, got {timeout!r}")
    return definition


def queue_declaration(
    name: str,
    concurrency: Concurrency | None,
    max_workers: int | None,
    ordering: Ordering,
    max_active: int | None,
    dispatch_deadline: str | float | None,
    rate: Rate | Sequence[Rate] | None = None,
    rate_partition: Partition | None = None,
    adaptive: Adaptive | None = None,
) -> QueueConfig:
    """A queue's limits as `app.queue` declares them (the QueueConfig checks its own values)."""
    deadline = _optional_duration(dispatch_deadline, "dispatch_deadline")
    return QueueConfig(
        name,
        concurrency or Concurrency(),
        max_workers,
        ordering,
        max_active,
        deadline,
        rate=check_rates(rate, f"queue {name} rate"),
        rate_partition=Partition() if rate_partition is None else rate_partition,
        adaptive=adaptive,
    )


def _optional_duration(value: str | float | None, name: str) -> float | None:
    return None if value is None else parse_duration(value, name=name)
