"""What `@app.step` and `@app.workflow` produce: a function plus how to run it.

A `Step` is what `wf.step` and `wf.map` schedule: its name (the base of its
step keys), the pool slots it claims and its own retries. A
`WorkflowDefinition` is what the worker needs to execute a workflow run: the
function that builds the DAG, the parameter that receives the builder, and the
executor (the workflow's own, else the app's default, resolved at registration).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from tidegate.domain.pools import pool_needs
from tidegate.workflow.errors import WorkflowError
from tidegate.workflow.executors import Executor

# Set while a workflow function builds its DAG, so a step called directly there
# (instead of through `wf.step`) fails clearly instead of running in the worker.
building: ContextVar[str | None] = ContextVar("tidegate_building_workflow", default=None)


class Step:
    """A function marked with `@app.step`. Calling it runs it here and now, outside any workflow."""

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        name: str,
        pools: Mapping[str, int],
        max_attempts: int,
        retry_backoff: float,
        rates: Mapping[str, int] | None = None,
    ) -> None:
        self.fn = fn
        self.name = name
        self.pools: Mapping[str, int] = MappingProxyType(dict(pools))
        self.pool_needs: Mapping[str, int] = MappingProxyType(pool_needs(pools))  # {scope: slots}, validated
        # {named rate: cost}, validated by the decorator; paid with the pool slots, all or none
        self.rates: Mapping[str, int] = MappingProxyType(dict(rates or {}))
        self.max_attempts = max_attempts
        self.retry_backoff = retry_backoff
        self.is_async = inspect.iscoroutinefunction(fn)
        self.__doc__ = fn.__doc__
        self.__name__ = getattr(fn, "__name__", name)
        self.__wrapped__ = fn

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        workflow = building.get()
        if workflow is not None:
            raise WorkflowError(
                f"step {self.name} was called directly inside workflow {workflow}: "
                f"schedule it with wf.step({self.name}, ...) (or wf.map) so it runs as a step"
            )
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        pools = "".join(f" {pool}={slots}" for pool, slots in sorted(self.pools.items()))
        rates = "".join(f" rate:{rate}={cost}" for rate, cost in sorted(self.rates.items()))
        return f"<Step {self.name}{pools}{rates}>"


@dataclass(frozen=True)
class WorkflowDefinition:
    """A registered workflow: `fn(wf, **args)` builds the DAG of the run."""

    name: str
    fn: Callable[..., Any]
    builder_param: str
    executor: Executor
