"""`tidegate.Task`: a registered function, callable here or submitted to run durably.

A task knows its runs' destination only as a `RunTarget` (the app's
submitter), so it depends on the submit path and never on the `App` itself.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from tidegate.app.handle import RunHandle
from tidegate.app.submit import UNSET, RunTarget, SubmitKeys, TaskOptions
from tidegate.domain import parameters
from tidegate.domain.model import TaskDefinition
from tidegate.domain.parameters import describe
from tidegate.domain.unique import Unique
from tidegate.worker.context import Context
from tidegate.worker.execution import TaskFunction


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

    def __init__(
        self, target: RunTarget, fn: Callable[..., Any], definition: TaskDefinition, unique: Unique | None = None
    ) -> None:
        """`unique`: once per key for its runs, checked here against the function's parameters."""
        self._target = target
        self.fn = fn
        self.function = TaskFunction(definition.name, fn, find_context_param(fn), max_snoozes=definition.max_snoozes)
        # What a run's args must be, described once from the code and stored with the task,
        # so that a submit by name elsewhere is checked by the same rule (domain/parameters.py).
        described = describe(fn, skip=self._filled_by_worker())
        names = None if described.extra_keywords else described.names
        checked = None if unique is None else unique.checked(definition.name, names)
        self.definition = replace(definition, parameters=described, unique=checked)
        self._plain_options: tuple[TaskDefinition, TaskOptions] | None = None
        self.__doc__ = fn.__doc__
        self.__name__ = getattr(fn, "__name__", definition.name)

    @property
    def name(self) -> str:
        return self.definition.name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def submit(self, **args: Any) -> RunHandle:
        return self._plain().submit(**args)

    def submit_many(self, many_args: Iterable[Mapping[str, Any]]) -> list[RunHandle]:
        """Submit many runs in one transaction (all stored, or none)."""
        return self._plain().submit_many(many_args)

    async def submit_async(self, **args: Any) -> RunHandle:
        """`submit` from an event loop (on PostgreSQL no thread: the store's async pool)."""
        return await self._plain().submit_async(**args)

    async def submit_many_async(self, many_args: Iterable[Mapping[str, Any]]) -> list[RunHandle]:
        return await self._plain().submit_many_async(many_args)

    def _plain(self) -> TaskOptions:
        """`options()` with no option given, built once per definition: a `TaskOptions` holds no
        state of its own, so every plain submit can share one (its options checked once)."""
        built = self._plain_options
        if built is None or built[0] is not self.definition:
            built = self._plain_options = (self.definition, self.options())
        return built[1]

    def options(
        self,
        *,
        priority: int = UNSET,
        tags: Mapping[str, str] | None = None,
        queue: str = UNSET,
        run_at: datetime | timedelta | None = None,
        concurrency_key: str | None = None,
        unique_key: str | None = None,
        idempotency_key: str | None = None,
        idempotency_ttl: str | float | None = None,
        connection: Any = None,
        rate_cost: int | None = None,
    ) -> TaskOptions:
        """Per-submit options. `unique_key`: the key of the task's `Unique` rule (or of the default one:
        a run queued, running or waiting holds it) instead of its args; `idempotency_key`: every
        submit with it within `idempotency_ttl` (default a day) of the first returns that run, unless
        it failed or was canceled. `connection`: your own open transaction's connection (psycopg
        `Connection` / `AsyncConnection` on PostgreSQL, `sqlite3.Connection` on SQLite): the runs are
        written in it and reach workers only if you commit it. `rate_cost`: these runs' cost to their
        queue's rate, instead of the task's `rate_cost`."""
        options = (priority, tags, queue, run_at, concurrency_key)
        keys = SubmitKeys(unique_key, idempotency_key, idempotency_ttl)
        return TaskOptions(
            self._target, self.definition, *options, keys=keys, connection=connection, rate_cost=rate_cost
        )

    def check_args(self, args: Mapping[str, Any]) -> None:
        """Raise `ArgumentMismatch` unless `args` fit this task's parameters (what every submit checks)."""
        assert self.definition.parameters is not None  # described in __init__
        parameters.check_args(self.name, self.definition.parameters, args)

    def _filled_by_worker(self) -> tuple[str, ...]:
        """Parameters the worker passes itself (the `Context`), which a run's args do not give."""
        return () if self.function.context_param is None else (self.function.context_param,)

    def __repr__(self) -> str:
        return f"<Task {self.name} queue={self.definition.queue}>"
