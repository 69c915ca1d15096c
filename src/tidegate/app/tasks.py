"""`tidegate.Task`: a registered function, callable here or submitted to run durably.

A task knows its runs' destination only as a `RunTarget` (the app's
submitter), so it depends on the submit path and never on the `App` itself.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from tidegate.app.handle import RunHandle
from tidegate.app.submit import UNSET, RunTarget, TaskOptions
from tidegate.domain.errors import InvalidArgument
from tidegate.domain.model import TaskDefinition
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

    def __init__(self, target: RunTarget, fn: Callable[..., Any], definition: TaskDefinition) -> None:
        self._target = target
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
        priority: int = UNSET,
        tags: Mapping[str, str] | None = None,
        queue: str = UNSET,
        run_at: datetime | timedelta | None = None,
        concurrency_key: str | None = None,
    ) -> TaskOptions:
        options = (priority, tags, queue, run_at, concurrency_key)
        return TaskOptions(self._target, self.definition, self.check_args, *options)

    def check_args(self, args: Mapping[str, Any]) -> None:
        try:
            self._signature.bind(**args)
        except TypeError as error:
            raise InvalidArgument(f"{self.name}: {error}") from None

    def __repr__(self) -> str:
        return f"<Task {self.name} queue={self.definition.queue}>"
