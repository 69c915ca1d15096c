"""A workflow's child steps (`wf.child`, `wf.map_children`): trigger through the store, wait together.

Each child node owns a fixed range of positions among the run's children
(`CHILD_SPAN` per node, in build order), so a replay finds every child it
triggered before, whatever order its steps ran in. A node triggers what its
window allows, takes the results of the children that ended, and blocks on
the rest. When every node still running is blocked on children (no step is
executing), the run waits as a task does: `Store.trigger_children` with a
wait ends the attempt `waiting` (holding no worker), and the resumed attempt
rebuilds the DAG, reads its checkpoints and finds its children's results.

The window slides: while some blocked node has items it has not triggered,
the run waits on *any* of its children (`wait_any`), so the first child to
end queues it again, and the resumed attempt triggers the next item at once,
keeping `concurrency` children in flight. The store decides which items are
in flight (its unfinished children) and which are stored (by position), so a
crash anywhere neither loses an item's child nor triggers one twice. With
every item triggered, the run waits on all of them: waking it earlier would
only let it find nothing to do.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from tidegate.domain.children import ChildRecord, NewChild, TriggerRequest, WaitSuspended
from tidegate.domain.errors import TidegateError
from tidegate.engine.runtime import tracing
from tidegate.engine.runtime.children import builder_of, result_of
from tidegate.storage.port import Fence, Store
from tidegate.workflow.builder import CHILD_SPAN, ChildNode
from tidegate.workflow.errors import StepError, WorkflowError

Call = Callable[..., Awaitable[Any]]


class ChildWaits:
    """The child nodes of one workflow attempt, and the wait that suspends it."""

    def __init__(self, store: Store, fence: Fence, worker_id: str, call: Call) -> None:
        self._store = store
        self._fence = fence
        self._worker_id = worker_id
        self._call = call  # runs a store call off the event loop
        self._pending: dict[int, NewChild] = {}  # unfinished children some blocked node waits for
        self._woken = asyncio.Event()
        self.blocked = 0  # nodes blocked on children
        self._sliding = 0  # of them, nodes with items not triggered yet: the run waits on any child
        self.changed = asyncio.Event()  # set when a node blocks: the run may have to wait

    async def execute(self, node: ChildNode, items: Any, kwargs: Mapping[str, Any]) -> Any:
        """The node's output: the child's result, or the list of its children's results."""
        if items is not None and not isinstance(items, (list, tuple)):
            raise StepError(
                node.key, f"WorkflowError: wf.map_children needs a list of items, got {type(items).__name__}"
            )
        many = [dict(kwargs)] if items is None else [_item_args(node, item, kwargs) for item in items]
        if len(many) > CHILD_SPAN:
            raise StepError(node.key, f"WorkflowError: wf.map_children takes at most {CHILD_SPAN} items")
        runs = builder_of(node.task).new_runs(many)
        children = [NewChild(run, node.ordinal * CHILD_SPAN + index, True) for index, run in enumerate(runs)]
        window = node.concurrency or max(1, len(children))
        while True:
            known = await self._call(self._store.run_children, self._fence[0])
            stored = {child.index: child for child in known}
            ended = [stored.get(child.index) for child in children]
            if all(record is not None and record.finished for record in ended):
                results = [_result(node, record) for record in ended if record is not None]
                return results[0] if items is None else results
            new = await self._trigger_window(children, stored, window)
            in_flight = [child for child in children if _in_flight(stored.get(child.index))] + new
            untriggered = sum(1 for child in children if child.index not in stored) - len(new)
            await self._block(in_flight, untriggered > 0)

    async def _trigger_window(
        self, children: Sequence[NewChild], stored: Mapping[int, ChildRecord], window: int
    ) -> list[NewChild]:
        """Store the next children the window lets in, in item order (those already stored are
        checked again); the ones stored now. In flight are the stored children not ended: the
        store's record, whatever attempt triggered them. The wait is on those alone: a wait
        stores the children it is on, and an item outside the window must not be triggered."""
        in_flight = sum(1 for child in children if _in_flight(stored.get(child.index)))
        new = [child for child in children if child.index not in stored][: max(0, window - in_flight)]
        if new:
            known = [child for child in children if child.index in stored]
            with tracing.triggering(new, wait=False) as traced:
                trigger = TriggerRequest(self._fence, self._worker_id, known + traced)
                answer = await self._call(self._store.trigger_children, trigger)
            if answer.canceled:
                raise WorkflowError("the run was asked to cancel: no child is triggered any more")
        return new

    async def _block(self, waiting_for: Sequence[NewChild], sliding: bool) -> None:
        for child in waiting_for:
            self._pending[child.index] = child
        self.blocked += 1
        self._sliding += sliding
        self.changed.set()
        woken = self._woken
        try:
            await woken.wait()
        finally:
            self.blocked -= 1
            self._sliding -= sliding
            for child in waiting_for:
                self._pending.pop(child.index, None)

    def node_done(self) -> None:
        """A node ended: if some are blocked, those left running may all be blocked now, and the
        run must look again whether to wait (no node blocking anew would tell it)."""
        if self.blocked:
            self.changed.set()

    async def suspend(self) -> None:
        """Every running node is blocked on children: wait for them without a worker (raises
        WaitSuspended), or, if one ended meanwhile, wake the nodes to take its result. A node
        with items left to trigger makes it a wait on any child (the module's docstring)."""
        self.changed.clear()
        pending = sorted(self._pending.values(), key=lambda child: child.index)
        stored = await self._call(self._store.run_children, self._fence[0])
        if pending and not any(record.finished for record in stored if record.index in self._pending):
            wait_any = self._sliding > 0
            trigger = TriggerRequest(self._fence, self._worker_id, pending, wait=True, wait_any=wait_any)
            answer = await self._call(self._store.trigger_children, trigger)
            if answer.waiting:
                raise WaitSuspended(f"waiting for {len(pending)} children")
        woken, self._woken = self._woken, asyncio.Event()
        woken.set()


def _in_flight(record: ChildRecord | None) -> bool:
    return record is not None and not record.finished


def _result(node: ChildNode, record: ChildRecord) -> Any:
    try:
        return result_of(record)
    except TidegateError as error:
        raise StepError(node.key, f"{type(error).__name__}: {error}") from None


def _item_args(node: ChildNode, item: Any, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    if node.arg is not None:
        return {node.arg: item, **kwargs}
    if isinstance(item, dict):
        return {**item, **kwargs}
    return {_first_parameter(node): item, **kwargs}


def _first_parameter(node: ChildNode) -> str:
    """The task's first parameter that is not its Context: where an item goes by default."""
    fn = getattr(node.task, "fn", None)
    context = getattr(getattr(node.task, "function", None), "context_param", None)
    if fn is not None:
        for name in inspect.signature(fn).parameters:
            if name != context:
                return name
    raise StepError(node.key, "WorkflowError: wf.map_children: name the parameter items go to with arg=...")
