"""What a trigger takes and gives: a task's runs built with its submit options, a child's result.

Shared by `ctx.trigger*` (worker/children.py) and a workflow's child steps
(workflow/children.py), which both trigger children through the store.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from tidegate.domain.children import ChildRecord
from tidegate.domain.errors import InvalidArgument, RunCanceled, RunFailed
from tidegate.domain.model import NewRun, RunStatus


class RunsBuilder(Protocol):
    """Submit options of a task (`task.options(...)`): builds checked runs without storing them."""

    def new_runs(self, many_args: Iterable[Mapping[str, Any]]) -> list[NewRun]: ...


class Triggerable(Protocol):
    """A task (`@app.task`): its default options."""

    def options(self) -> RunsBuilder: ...


def builder_of(task: Triggerable | RunsBuilder) -> RunsBuilder:
    """`ctx.trigger(task, ...)` takes a task, or a task with options (`task.options(queue=...)`)."""
    if hasattr(task, "new_runs"):
        return task  # type: ignore[return-value]
    if hasattr(task, "options"):
        return task.options()
    raise InvalidArgument(f"trigger needs a task (or task.options(...)), got {type(task).__name__}")


def result_of(child: ChildRecord) -> Any:
    """A finished child's result, or the error it ended with."""
    if child.status is RunStatus.COMPLETED:
        return child.result
    if child.status is RunStatus.CANCELED:
        raise RunCanceled(child.id, child.error)
    raise RunFailed(child.id, child.error)
