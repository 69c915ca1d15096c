"""`@app.step` and `@app.workflow`: declaring the steps of a workflow, and workflows as tasks.

A workflow is registered as a task, so it is submitted, claimed, limited,
retried and recovered like any run; what differs is only how the worker
executes it (`tidegate.workflow`). Everything a declaration can get wrong is
checked here, when the module is imported, not when a run first executes.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable, Mapping
from typing import Any

from tidegate.app.submit import RunTarget
from tidegate.app.tasks import Task
from tidegate.domain import names
from tidegate.domain.durations import parse_duration
from tidegate.domain.errors import ConfigurationError
from tidegate.domain.model import TaskDefinition
from tidegate.domain.named_rates import check_step_rates
from tidegate.domain.pools import check_step_key
from tidegate.worker.execution import TaskFunction
from tidegate.workflow import Executor, Step, Workflow, WorkflowDefinition


def make_step(
    fn: Callable[..., Any],
    *,
    name: str | None,
    pool: str | None,
    pool_slots: int | None,
    pools: Mapping[str, int] | None,
    max_attempts: int,
    retry_backoff: str | float,
    rates: Mapping[str, int] | None = None,
) -> Step:
    """A `Step` from the decorator's options: one pool (`pool`, `pool_slots`) or several (`pools`),
    and the named rates it pays (`rates`, {name: cost})."""
    step_name = name if name is not None else getattr(fn, "__name__", "")
    if not isinstance(step_name, str) or ":" in step_name or "[" in step_name:
        raise ConfigurationError(f"step name {step_name!r} is not valid: ':' and '[' are kept for step keys")
    check_step_key(step_name)  # lambdas ('<lambda>') need name=
    if pool is not None and pools is not None:
        raise ConfigurationError(f"step {step_name}: give pool= (with pool_slots=) or pools={{...}}, not both")
    if pool is None and pool_slots is not None:
        raise ConfigurationError(f"step {step_name}: pool_slots= needs pool=")
    needs: Mapping[str, int] = pools if pools is not None else {}
    if pool is not None:
        needs = {pool: 1 if pool_slots is None else pool_slots}
    return Step(
        fn,
        name=step_name,
        pools=needs,
        rates=check_step_rates(rates),
        max_attempts=names.check_max_attempts(max_attempts),
        retry_backoff=parse_duration(retry_backoff, name="retry_backoff"),
    )


class WorkflowTask(Task):
    """A workflow registered as a task: `submit(**args)` stores a run whose worker builds and executes its DAG."""

    def __init__(
        self, target: RunTarget, fn: Callable[..., Any], definition: TaskDefinition, executor: Executor
    ) -> None:
        if inspect.iscoroutinefunction(fn):
            raise ConfigurationError(
                f"workflow {definition.name} is async: a workflow function only builds the DAG, "
                "so it is a plain def (its steps may be async)"
            )
        self._builder = find_builder_param(fn, definition.name)
        super().__init__(target, fn, definition)
        self.workflow_definition = WorkflowDefinition(definition.name, fn, self._builder, executor)
        self.function = TaskFunction(definition.name, fn, None, self.workflow_definition, definition.max_snoozes)

    def _filled_by_worker(self) -> tuple[str, ...]:
        return (self._builder,)  # the builder `wf`; a workflow's args are the rest

    def __repr__(self) -> str:
        return f"<Workflow {self.name} queue={self.definition.queue} executor={self.workflow_definition.executor!r}>"


def find_builder_param(fn: Callable[..., Any], name: str) -> str:
    """The parameter that receives the `tidegate.Workflow` builder: annotated so, else the first one."""
    try:
        hints = typing.get_type_hints(fn)
    except Exception:
        hints = {}
    parameters = inspect.signature(fn).parameters
    for param, parameter in parameters.items():
        annotation = hints.get(param, parameter.annotation)
        if annotation is Workflow or annotation in ("Workflow", "tidegate.Workflow"):
            return param
    if not parameters:
        raise ConfigurationError(f"workflow {name} takes no parameter: its first one receives the builder `wf`")
    return next(iter(parameters))
