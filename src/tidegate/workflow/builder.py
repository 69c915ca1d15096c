"""Building a workflow's DAG: `wf.step`, `wf.map` and the step keys.

The workflow function only *describes* the run: each `wf.step` / `wf.map`
adds a node and returns a `StepRef`, a placeholder for that node's output.
Nothing executes while building, so a recovered run can rebuild the same DAG
and find its checkpoints by key.

Step keys are deterministic in build order: the first use of a step is its
name (`heavy_query`), later uses add `:2`, `:3` (`heavy_query:2`), and the
items of a map add their index (`heavy_query[3]`, `heavy_query:2[0]`). The
same function with the same args builds the same keys on every worker. (Step
names cannot contain ':' or '[', so a key never reads two ways.)
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tidegate.domain.pools import step_key
from tidegate.workflow.definitions import Step, WorkflowDefinition, building
from tidegate.workflow.errors import WorkflowError

_builder_ids = itertools.count(1)


@dataclass(frozen=True)
class StepRef:
    """The future output of a step (or the list of a map's item outputs), usable as an argument."""

    key: str
    workflow: int  # which builder made it: a ref cannot cross workflows

    def __repr__(self) -> str:
        return f"StepRef({self.key!r})"


@dataclass(frozen=True)
class StepNode:
    """One step: `step(*args, **kwargs)` once every ref in them has its output."""

    key: str
    step: Step
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    deps: tuple[str, ...]


@dataclass(frozen=True)
class MapNode:
    """`step(item, **kwargs)` for each item: a list given now, or the output list of a step."""

    key: str
    step: Step
    items: Sequence[Any] | StepRef
    kwargs: dict[str, Any]
    concurrency: int | None
    deps: tuple[str, ...]

    def item_key(self, index: int) -> str:
        return step_key(self.key, index)


@dataclass(frozen=True)
class ChildNode:
    """`wf.child` / `wf.map_children`: child runs of a task, the node's output their results.

    `items` None: one child with `kwargs`; else one child per item (`{arg: item, **kwargs}`,
    or the item's own keys when it is a dict and no `arg` is named), at most `concurrency`
    unfinished at once. `ordinal` fixes the children's positions among the run's children
    (`CHILD_SPAN` apart per node), so a replay finds each one whatever order steps ran in.
    """

    key: str
    task: Any  # a task, or a task with options (engine.runtime.children.Triggerable | RunsBuilder)
    items: Sequence[Any] | StepRef | None
    kwargs: dict[str, Any]
    arg: str | None
    concurrency: int | None
    ordinal: int
    deps: tuple[str, ...]


CHILD_SPAN = 100_000  # positions per child node: a map of children has at most this many items

Node = StepNode | MapNode | ChildNode


@dataclass
class Dag:
    """The nodes in build order (so every node's deps come before it) and the result ref."""

    name: str
    nodes: dict[str, Node] = field(default_factory=dict)
    result: StepRef | None = None


class Workflow:
    """The builder a workflow function receives as `wf`."""

    def __init__(self, name: str) -> None:
        self._id = next(_builder_ids)
        self._dag = Dag(name)
        self._uses: dict[str, int] = {}
        self._open = True

    def step(self, fn: Step, *args: Any, **kwargs: Any) -> StepRef:
        """Schedule `fn(*args, **kwargs)`; any StepRef among the args (also inside lists and dicts)
        is a dependency, replaced by that step's output when this one runs."""
        step = self._check_step(fn, "step")
        deps = self._deps((args, kwargs))
        key = self._next_key(step.name)
        self._dag.nodes[key] = StepNode(key, step, tuple(args), dict(kwargs), deps)
        return StepRef(key, self._id)

    def map(
        self, fn: Step, items: Sequence[Any] | StepRef, *, concurrency: int | None = None, **kwargs: Any
    ) -> StepRef:
        """Schedule `fn(item, **kwargs)` for every item, at most `concurrency` in flight (None: no window).

        `items` is a list, or the ref of a step whose output is a list (expanded
        when that step completes). The ref returned stands for the list of the
        item outputs, in item order.
        """
        step = self._check_step(fn, "map")
        if concurrency is not None and (
            isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1
        ):
            raise WorkflowError(
                f"wf.map({step.name}): concurrency must be an integer >= 1 or None, got {concurrency!r}"
            )
        if isinstance(items, StepRef):
            source: Sequence[Any] | StepRef = items
        elif isinstance(items, (list, tuple)):
            source = tuple(items)
        else:
            raise WorkflowError(
                f"wf.map({step.name}): items must be a list or the ref of a step that returns a list, "
                f"got {type(items).__name__}"
            )
        deps = self._deps((source, kwargs))
        key = self._next_key(step.name)
        self._dag.nodes[key] = MapNode(key, step, source, dict(kwargs), concurrency, deps)
        return StepRef(key, self._id)

    def child(self, task: Any, **args: Any) -> StepRef:
        """A child run of `task` (a task, or `task.options(...)`); its ref stands for the child's
        result. While only child runs are outstanding, the run waits holding no worker."""
        return self._child_node(task, None, args, None, None, "child")

    def map_children(
        self,
        task: Any,
        items: Sequence[Any] | StepRef,
        *,
        concurrency: int | None = None,
        arg: str | None = None,
        **kwargs: Any,
    ) -> StepRef:
        """One child run per item (passed as the task's first parameter, or `arg`; a dict item
        gives its keys when `arg` is None), at most `concurrency` unfinished at once; the ref
        stands for their results in item order."""
        if concurrency is not None and (
            isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1
        ):
            raise WorkflowError(f"wf.map_children: concurrency must be an integer >= 1 or None, got {concurrency!r}")
        if not isinstance(items, (StepRef, list, tuple)):
            raise WorkflowError(f"wf.map_children: items must be a list or a step's ref, got {type(items).__name__}")
        source = items if isinstance(items, StepRef) else tuple(items)
        return self._child_node(task, source, kwargs, arg, concurrency, "map_children")

    def _child_node(
        self,
        task: Any,
        items: Sequence[Any] | StepRef | None,
        kwargs: dict[str, Any],
        arg: str | None,
        concurrency: int | None,
        verb: str,
    ) -> StepRef:
        if not self._open:
            raise WorkflowError(f"wf.{verb} was called after workflow {self._dag.name} was built")
        if not (hasattr(task, "options") or hasattr(task, "new_runs")):
            raise WorkflowError(f"wf.{verb}: {task!r} is not a task: pass an @app.task (or task.options(...))")
        name = str(getattr(task, "name", None) or getattr(getattr(task, "_definition", None), "name", "child"))
        ordinal = sum(1 for node in self._dag.nodes.values() if isinstance(node, ChildNode))
        key = self._next_key(f"child.{name.replace(':', '_').replace('[', '_')}")
        deps = self._deps((items, kwargs))
        self._dag.nodes[key] = ChildNode(key, task, items, dict(kwargs), arg, concurrency, ordinal, deps)
        return StepRef(key, self._id)

    # --- building --------------------------------------------------------------------

    def _check_step(self, fn: Any, verb: str) -> Step:
        if not self._open:
            raise WorkflowError(
                f"wf.{verb} was called after workflow {self._dag.name} was built: "
                "steps can only be added while the workflow function runs (not from inside a step)"
            )
        if isinstance(fn, Step):
            return fn
        if getattr(fn, "workflow_definition", None) is not None:
            raise WorkflowError(
                f"wf.{verb}: {getattr(fn, 'name', fn)!r} is a workflow, not a step: "
                "a workflow cannot run inside another one (submit it as its own run instead)"
            )
        name = getattr(fn, "__name__", repr(fn))
        raise WorkflowError(f"wf.{verb}: {name} is not a step: decorate it with @app.step")

    def _next_key(self, name: str) -> str:
        uses = self._uses.get(name, 0) + 1
        self._uses[name] = uses
        return name if uses == 1 else f"{name}:{uses}"

    def _deps(self, value: Any) -> tuple[str, ...]:
        deps: list[str] = []
        for ref in iter_refs(value):
            if ref.workflow != self._id:
                raise WorkflowError(f"{ref!r} belongs to another workflow: a step can only use refs of its own run")
            if ref.key not in deps:
                deps.append(ref.key)
        return tuple(deps)

    def _finish(self, returned: Any) -> Dag:
        self._open = False
        if returned is not None:
            if not isinstance(returned, StepRef) or returned.workflow != self._id:
                raise WorkflowError(
                    f"workflow {self._dag.name} returned {returned!r}: return the ref of one of its steps "
                    "(its output becomes the run's result) or nothing"
                )
            self._dag.result = returned
        return self._dag


def build_dag(definition: WorkflowDefinition, args: Mapping[str, Any]) -> Dag:
    """Run the workflow function with a fresh builder; the DAG it describes."""
    wf = Workflow(definition.name)
    token = building.set(definition.name)
    try:
        returned = definition.fn(**{definition.builder_param: wf}, **args)
    finally:
        building.reset(token)
    return wf._finish(returned)


def iter_refs(value: Any) -> Iterator[StepRef]:
    """Every StepRef in `value`, looking inside lists, tuples and dict values."""
    if isinstance(value, StepRef):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from iter_refs(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from iter_refs(item)


def resolve(value: Any, outputs: Mapping[str, Any]) -> Any:
    """`value` with every StepRef replaced by its step's output."""
    if isinstance(value, StepRef):
        return outputs[value.key]
    if isinstance(value, list):
        return [resolve(item, outputs) for item in value]
    if isinstance(value, tuple):
        return tuple(resolve(item, outputs) for item in value)
    if isinstance(value, dict):
        return {key: resolve(item, outputs) for key, item in value.items()}
    return value
