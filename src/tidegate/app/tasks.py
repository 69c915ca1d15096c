"""Tasks and submit options: turning a Python call into a stored run.

Everything a run needs is validated here, before the store is touched, so a
bad submit raises a clear error and stores nothing.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from ulid import ULID

from tidegate.app.handle import RunHandle
from tidegate.domain import names
from tidegate.domain.durations import MAX_DURATION
from tidegate.domain.errors import InvalidArgument
from tidegate.domain.jsonvalue import ensure_json, ensure_size
from tidegate.domain.model import NewRun, TaskDefinition
from tidegate.domain.scopes import partition_of
from tidegate.worker.context import Context
from tidegate.worker.execution import TaskFunction

if TYPE_CHECKING:
    from tidegate.app.app import App

_UNSET: Any = object()


def find_context_param(fn: Callable[..., Any]) -> str | None:
    """The parameter annotated `tidegate.Context`, if the task declares one."""
    try:
        hints = typing.get_type_hints(fn)
    except Exception:
        hints = {}
    for name, parameter in inspect.signature(fn).parameters.items():
        annotation = hints.get(name, parameter.annotation)
        if annotation is Context or annotation in ("Context", "tidegate.Context"):
            return name
    return None


class Task:
    """A registered function. Call it directly to run it here; `submit` to run it durably."""

    def __init__(self, app: App, fn: Callable[..., Any], definition: TaskDefinition) -> None:
        self.app = app
        self.fn = fn
        self.definition = definition
        self.function = TaskFunction(definition.name, fn, find_context_param(fn))
        signature = inspect.signature(fn)
        self._signature = signature.replace(
            parameters=[p for n, p in signature.parameters.items() if n != self.function.context_param]
        )
        self.__doc__ = fn.__doc__
        self.__name__ = getattr(fn, "__name__", definition.name)

    @property
    def name(self) -> str:
        return self.definition.name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def submit(self, **args: Any) -> RunHandle:
        return self.options().submit(**args)

    def submit_many(self, many_args: Iterable[Mapping[str, Any]]) -> list[RunHandle]:
        """Submit many runs in one transaction (all stored, or none)."""
        return self.options().submit_many(many_args)

    def options(
        self,
        *,
        priority: int = _UNSET,
        tags: Mapping[str, str] | None = None,
        queue: str = _UNSET,
        run_at: datetime | timedelta | None = None,
        concurrency_key: str | None = None,
    ) -> TaskOptions:
        return TaskOptions(self.app, self.definition, self, priority, tags, queue, run_at, concurrency_key)

    def check_args(self, args: Mapping[str, Any]) -> None:
        try:
            self._signature.bind(**args)
        except TypeError as error:
            raise InvalidArgument(f"{self.name}: {error}") from None

    def __repr__(self) -> str:
        return f"<Task {self.name} queue={self.definition.queue}>"


class TaskOptions:
    """A task with per-submit options; `submit` stores a run with them."""

    def __init__(
        self,
        app: App,
        definition: TaskDefinition,
        task: Task | None,
        priority: int,
        tags: Mapping[str, str] | None,
        queue: str,
        run_at: datetime | timedelta | None,
        concurrency_key: str | None,
    ) -> None:
        self._app = app
        self._definition = definition
        self._task = task
        self._priority = definition.priority if priority is _UNSET else names.check_priority(priority)
        self._tags = {**definition.tags, **names.check_tags(tags)}
        self._queue = definition.queue if queue is _UNSET else names.check_name("queue", queue)
        self._run_at = _check_run_at(run_at)
        self._concurrency_key = names.check_concurrency_key(concurrency_key)

    def submit(self, **args: Any) -> RunHandle:
        return self.submit_many([args])[0]

    def submit_many(self, many_args: Iterable[Mapping[str, Any]]) -> list[RunHandle]:
        self._queue_config = self._app.queue_config(self._queue)  # an undeclared queue fails here
        runs = [self._new_run(args) for args in many_args]
        return self._app._enqueue(runs)

    def _new_run(self, args: Mapping[str, Any]) -> NewRun:
        if not isinstance(args, Mapping):
            raise InvalidArgument(f"{self._definition.name}: args must be a dict, got {type(args).__name__}")
        limit = self._app.max_payload
        at_most = 2
        for key, value in args.items():
            if not isinstance(key, str):
                raise InvalidArgument(f"{self._definition.name}: argument names must be strings, got {key!r}")
            at_most += ensure_json(key, f"{self._definition.name}: argument name {key[:20]!r}") + 2
            at_most += ensure_json(value, f"{self._definition.name}: argument {key!r}", max_bytes=limit)
        if self._task is not None:
            self._task.check_args(args)
        ensure_size(dict(args), f"{self._definition.name}: args", limit, at_most=at_most)
        return NewRun(
            id=str(ULID()),
            task=self._definition.name,
            queue=self._queue,
            partition=partition_of(self._queue_config, self._definition.name, args, self._concurrency_key),
            args=dict(args),
            priority=self._priority,
            tags=self._tags,
            concurrency_key=self._concurrency_key,
            max_attempts=self._definition.max_attempts,
            retry_backoff=self._definition.retry_backoff,
            timeout=self._definition.timeout,
            delay=_delay_until(self._run_at),
            deadline=(
                self._definition.dispatch_deadline
                if self._definition.dispatch_deadline is not None
                else self._queue_config.dispatch_deadline
            ),
        )


def _check_run_at(run_at: Any) -> datetime | timedelta | None:
    if run_at is None or isinstance(run_at, (datetime, timedelta)):
        return run_at
    raise InvalidArgument(f"run_at must be a datetime or a timedelta, got {run_at!r}")


def _delay_until(run_at: datetime | timedelta | None) -> float:
    """Seconds from now; the store adds them to its own clock. At most MAX_DURATION (100 years):
    a time further away would overflow the dates the stores hand back."""
    if run_at is None:
        return 0.0
    if isinstance(run_at, timedelta):
        delay = max(0.0, run_at.total_seconds())
    else:
        try:
            aware = run_at if run_at.tzinfo is not None else run_at.astimezone()
            delay = max(0.0, (aware - datetime.now(aware.tzinfo)).total_seconds())
        except (OverflowError, ValueError):  # a naive date at the edge of the calendar
            raise InvalidArgument(f"run_at {run_at!r} is out of range") from None
    if delay > MAX_DURATION:
        raise InvalidArgument(f"run_at {run_at!r} is out of range: at most 100 years from now")
    return delay
