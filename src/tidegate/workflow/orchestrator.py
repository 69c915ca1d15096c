"""Executing one attempt of a workflow run: checkpoints, ready steps, pools and windows.

The DAG is rebuilt on every attempt; the store holds the truth about it. On
start the attempt reads the run's step rows: completed steps are checkpoints
whose outputs are read back and never re-run; rows an earlier holder of the
run left running or failed go back to pending. Then every step whose deps are
done starts, each in its own task:

1. it acquires its pool slots (waiting here holds no executor slot, so steps of other
   pools, or of none, keep the executor busy meanwhile);
2. it takes one of the run's executor slots (`RunCaps`);
3. it records itself running (StepStarted), executes, checks its output is
   JSON and records it (StepCompleted), which also frees every slot it holds.

A map records all its items up front, then takes them only through
`Store.next_map_item`: the database picks the next item and holds its window
slot, so no list in this process decides what runs next, and an item's
completion (which frees its slot) is followed by taking the next one.

A step whose failure fails the run stops the run's dispatch before its failure
is recorded and frees its slots (`Dispatch`): nothing starts on them.

Every write is fenced on (run id, attempt): if the run was taken over, the
store refuses (`StepFencedOut`) and this attempt stops.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from opentelemetry.trace import Span

from tidegate.domain.errors import (
    PoolClaimTimeout,
    PoolRequestTooLarge,
    RateCostTooLarge,
    RateNotFound,
    StepFencedOut,
)
from tidegate.domain.jsonvalue import DEFAULT_MAX_PAYLOAD, JSONValue, ensure_payload
from tidegate.domain.pools import fanout_scope
from tidegate.domain.retry import retry_delay
from tidegate.domain.steps import StepRecord, StepStatus, StepUpdate
from tidegate.engine.runtime import tracing
from tidegate.storage.port import Fence, Store
from tidegate.workflow.builder import ChildNode, Dag, MapNode, Node, StepNode, StepRef, build_dag, resolve
from tidegate.workflow.children import ChildWaits
from tidegate.workflow.definitions import Step, WorkflowDefinition
from tidegate.workflow.dispatch import Dispatch, cancel_all
from tidegate.workflow.errors import SlotsLost, StepError, WorkflowStopped, error_text
from tidegate.workflow.executors import RunCaps
from tidegate.workflow.remote import remote_steps
from tidegate.workflow.slots import Held, RunSlots

if TYPE_CHECKING:
    from tidegate.engine.runtime.pools import PoolGuard

log = logging.getLogger("tidegate.workflow")

T = TypeVar("T")

STORE_THREADS = 4  # store calls of one run in flight at once (steps record and acquire concurrently)
STALLED_MAP_PAUSE = 0.5  # seconds before asking again for the items of a map whose window is held elsewhere
# the step fails at once: retrying cannot help
_UNRETRIED = (PoolRequestTooLarge, PoolClaimTimeout, RateNotFound, RateCostTooLarge)


@dataclass(frozen=True)
class Item:
    """Item `index` of a map whose window lets `window` items be in flight."""

    node: MapNode
    index: int
    window: int


@dataclass(frozen=True)
class RunScope:
    """Which attempt of which run this is, on which worker: what every step write is fenced on."""

    store: Store
    fence: Fence
    worker_id: str
    stopping: asyncio.Event = field(default_factory=asyncio.Event)  # set when the run is canceled
    max_payload: int = DEFAULT_MAX_PAYLOAD  # the largest step output stored (TIDEGATE_MAX_PAYLOAD)

    @property
    def run_id(self) -> str:
        return self.fence[0]


async def execute_workflow(
    definition: WorkflowDefinition, args: Mapping[str, Any], scope: RunScope, guard: PoolGuard
) -> JSONValue:
    """Build the run's DAG and execute it; the output of the step the workflow returned."""
    dag = build_dag(definition, args)
    slots = RunSlots(guard, scope.store, scope.fence, scope.worker_id)
    db = ThreadPoolExecutor(STORE_THREADS, thread_name_prefix="tidegate-steps-db")
    caps = RunCaps(definition.executor, remote_steps(definition, scope.store, scope.fence))
    try:
        return await WorkflowRun(dag, scope, caps, slots, db).run()
    finally:
        db.shutdown(wait=False)  # a write of an abandoned step may still be on its way: it is fenced
        if caps.remote is not None:
            await asyncio.shield(caps.remote.close())  # no Job outlives its run


class WorkflowRun:
    def __init__(self, dag: Dag, scope: RunScope, caps: RunCaps, slots: RunSlots, db: ThreadPoolExecutor) -> None:
        self._dag = dag
        self._scope = scope
        self._caps = caps
        self._slots = slots
        self._db = db
        self._outputs: dict[str, Any] = {}
        self._children = ChildWaits(scope.store, scope.fence, scope.worker_id, self._call)
        self._records: dict[str, StepRecord] = {}  # the checkpoints this attempt started from
        self._recorded: set[str] = set()  # keys that have a step row
        self._dispatch = Dispatch()

    async def run(self) -> JSONValue:
        await self._load_checkpoints()
        running: dict[asyncio.Task[Any], str] = {}
        started: set[str] = set(self._outputs)
        stop = asyncio.ensure_future(self._scope.stopping.wait())
        blocked = asyncio.ensure_future(self._children.changed.wait())
        try:
            while True:
                for key, node in self._dag.nodes.items():
                    if key not in started and all(dep in self._outputs for dep in node.deps):
                        started.add(key)
                        running[asyncio.create_task(self._execute_node(node), name=f"step {key}")] = key
                if not running:
                    break
                done, _ = await asyncio.wait([*running, stop, blocked], return_when=asyncio.FIRST_COMPLETED)
                if stop in done:
                    raise WorkflowStopped(f"run {self._scope.run_id} was canceled: no step starts any more")
                if blocked in done:
                    if self._children.blocked == len(running):  # only child waits are left: wait as a task
                        await self._children.suspend()
                    self._children.changed.clear()
                    blocked = asyncio.ensure_future(self._children.changed.wait())
                for task in done:
                    if task in running:
                        self._outputs[running.pop(task)] = task.result()
                        self._children.node_done()
        finally:
            stop.cancel()
            blocked.cancel()
            await cancel_all(running)
        result = self._dag.result
        return None if result is None else self._outputs[result.key]

    # --- checkpoints -----------------------------------------------------------------

    async def _load_checkpoints(self) -> None:
        records = await self._call(self._scope.store.run_steps, self._scope.run_id)
        self._records = {record.step_key: record for record in records}
        self._recorded = set(self._records)
        updates = []
        for record in records:
            if record.status is not StepStatus.COMPLETED and record.status is not StepStatus.PENDING:
                # Left by an attempt that is gone (crashed, handed back, failed): this attempt runs it again.
                updates.append(StepUpdate(record.step_key, StepStatus.PENDING, record.map_key, record.item_index))
        for key, node in self._dag.nodes.items():
            if isinstance(node, StepNode):
                checkpoint = self._records.get(key)
                if checkpoint is None:
                    updates.append(StepUpdate(key, StepStatus.PENDING))
                elif checkpoint.status is StepStatus.COMPLETED:
                    self._outputs[key] = checkpoint.output
            elif isinstance(node, MapNode) and not isinstance(node.items, StepRef):
                updates.extend(self._new_items(node, node.items))
        await self._write_many(updates)

    def _new_items(self, node: MapNode, items: Any) -> list[StepUpdate]:
        return [
            StepUpdate(node.item_key(index), StepStatus.PENDING, node.key, index)
            for index in range(len(items))
            if node.item_key(index) not in self._recorded
        ]

    # --- nodes -----------------------------------------------------------------------

    async def _execute_node(self, node: Node) -> Any:
        if isinstance(node, ChildNode):
            items = None if node.items is None else resolve(node.items, self._outputs)
            if items is not None and not isinstance(items, (list, tuple)):
                raise StepError(
                    node.key, f"WorkflowError: wf.map_children needs a list of items, got {type(items).__name__}"
                )
            return await self._children.execute(node, items, resolve(node.kwargs, self._outputs))
        if isinstance(node, StepNode):
            args = resolve(node.args, self._outputs)
            kwargs = resolve(node.kwargs, self._outputs)
            return await self._execute_step(node.step, node.key, args, kwargs, None)
        return await self._execute_map(node)

    async def _execute_map(self, node: MapNode) -> list[Any]:
        items = resolve(node.items, self._outputs)
        if not isinstance(items, (list, tuple)):
            raise StepError(
                node.key, f"WorkflowError: wf.map({node.step.name}) needs a list of items, got {type(items).__name__}"
            )
        kwargs = resolve(node.kwargs, self._outputs)
        await self._write_many(self._new_items(node, items))  # items of a step's output: recorded now
        outputs: dict[int, Any] = {}
        for index in range(len(items)):
            record = self._records.get(node.item_key(index))
            if record is not None and record.status is StepStatus.COMPLETED:
                outputs[index] = record.output
        window = node.concurrency or max(1, len(items))
        in_flight: dict[asyncio.Task[Any], int] = {}
        try:
            while len(outputs) < len(items):
                while (taken := await self._dispatch.take(lambda: self._next_item(node, window))) is not None:
                    index = _item_index(node, taken)
                    key = node.item_key(index)
                    task = asyncio.create_task(
                        self._execute_step(node.step, key, (items[index],), kwargs, Item(node, index, window)),
                        name=f"step {key}",
                    )
                    in_flight[task] = index
                if not in_flight:
                    await self._dispatch.proceed()  # stopped: the run's failure cancels this map
                    # Nothing of ours holds the window, yet none was free: holders of a gone
                    # attempt that the sweeper has not freed yet. Ask again shortly.
                    log.warning("map %s of run %s: window held elsewhere; retrying", node.key, self._scope.run_id)
                    await asyncio.sleep(STALLED_MAP_PAUSE)
                    continue
                done, _ = await asyncio.wait(in_flight, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    outputs[in_flight.pop(task)] = task.result()
        finally:
            await cancel_all(in_flight)
        return [outputs[index] for index in range(len(items))]

    async def _next_item(self, node: MapNode, window: int) -> StepRecord | None:
        store, scope = self._scope.store, self._scope
        return await self._call(store.next_map_item, scope.fence, scope.worker_id, node.key, window)

    # --- one step ----------------------------------------------------------------------

    async def _execute_step(
        self,
        step: Step,
        key: str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        item: Item | None,
    ) -> Any:
        """Run a step (or map item) with its own retries; StepError once they are spent."""
        attempt = 1
        while True:
            delay = retry_delay(attempt, step.max_attempts, step.retry_backoff, random.random())
            # A retried item lost its window slot when its failure was recorded: it acquires it again.
            window = (
                {} if item is None or attempt == 1 else {fanout_scope(self._scope.run_id, item.node.key): item.window}
            )
            try:
                with tracing.step(self._scope.run_id, key, attempt, step.pool_needs) as span:
                    return await self._execute_once(step, key, args, kwargs, item, window, delay is None, span)
            except StepFencedOut:
                raise
            except _UNRETRIED as error:
                await self._stop_dispatch(key)
                raise StepError(key, f"{type(error).__name__}: {error}") from None
            except Exception as error:
                if delay is None or self._scope.stopping.is_set():
                    await self._stop_dispatch(key)  # done already if the try got to record its failure
                    raise StepError(key, error_text(error)) from None
                log.info(
                    "step %s of run %s failed (try %d); retrying in %.2fs", key, self._scope.run_id, attempt, delay
                )
                attempt += 1
                await asyncio.sleep(delay)

    async def _execute_once(
        self,
        step: Step,
        key: str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        item: Item | None,
        window: dict[str, int],
        last: bool,
        span: Span,
    ) -> Any:
        """One try: acquire pool slots (and a retried item's window slot), take an executor slot, run, record.
        A failure of the `last` try fails the run: the run's dispatch stops before it frees any slot."""
        await self._dispatch.proceed()
        map_key = None if item is None else item.node.key
        index = None if item is None else item.index
        needs = {**step.pool_needs, **dict.fromkeys(window, 1)}
        start_record = StepUpdate(key, StepStatus.RUNNING, map_key, index)
        tracing.pool_wait(span, needs)
        async with self._slots.holding(start_record, needs, window, step.rates) as held:
            tracing.pool_acquired(span, needs)
            async with self._caps.slot(step.is_async, urgent=bool(needs or step.rates)):
                await self._dispatch.proceed()  # the run failed while this step waited for its slots
                # The start is recorded while the function starts, not before: one store round trip
                # less per step. It has landed (or refused us) before the outcome is recorded. A step
                # handed its slots in memory was recorded running by the hand-off's write.
                started = (
                    None
                    if held is not None and held.started_recorded
                    else asyncio.create_task(self._write(start_record))
                )
                try:
                    try:
                        running = asyncio.ensure_future(
                            self._caps.start(step.fn, step.is_async, args, kwargs, start_record)
                        )
                        if held is not None:
                            held.dispatched()  # a step that handed it these slots may record now
                        output = await self._outcome_of(running, held)
                    finally:
                        if started is not None:
                            await started
                    ensure_payload(output, f"step {key}: output", self._scope.max_payload)
                except StepFencedOut:
                    raise
                except Exception as error:
                    if last or self._scope.stopping.is_set():
                        await self._stop_dispatch(key)
                    await self._finish(
                        StepUpdate(key, StepStatus.FAILED, map_key, index, error=error_text(error)), held
                    )
                    raise
            await self._finish(StepUpdate(key, StepStatus.COMPLETED, map_key, index, output=output), held)
        return output

    async def _outcome_of(self, running: asyncio.Future[Any], held: Held | None) -> Any:
        """Await a step's function. Canceled while the run stops (canceled), the step still finishes
        and its outcome is recorded, so its work is kept; a second cancel (the grace is over, or the
        attempt is abandoned) stops it. A step whose pool slots are lost is stopped and fails: it
        would run on slots that may be someone else's (a process step's process is abandoned)."""
        try:
            if held is not None:
                lost = held.lost()
                await asyncio.wait([asyncio.shield(running), lost], return_when=asyncio.FIRST_COMPLETED)
                if not running.done():
                    await _stop(running)
                    raise SlotsLost(
                        "its pool slots were lost while it ran"
                        " (freed, or their lease about to run out: renewals failed)"
                    )
                lost.cancel()
            return await asyncio.shield(running)
        except asyncio.CancelledError:
            if not self._scope.stopping.is_set():
                await _stop(running)
                raise
        try:
            output = await asyncio.shield(running)
        except asyncio.CancelledError:
            await _stop(running)
            raise
        task = asyncio.current_task()
        if task is not None:
            task.uncancel()  # the stop reached this step after its start: it ends as it would have
        return output

    # --- the store ---------------------------------------------------------------------

    async def _finish(self, update: StepUpdate, held: Held | None) -> None:
        """Record a step finished; its slots go to the run's next step waiting for them (`RunSlots`)."""
        if not (await self._slots.finish(held, update, hand_on=not self._dispatch.stopped)).recorded:
            raise StepFencedOut(f"run {self._scope.run_id} attempt {self._scope.fence[1]} was taken over")
        self._recorded.add(update.step_key)

    async def _stop_dispatch(self, key: str) -> None:
        """Step `key` fails the run: stop dispatching before its slots are freed (logged once)."""
        if self._dispatch.stopped:
            return
        log.info(
            "step %s of run %s failed for good: the run starts no more steps",
            key,
            self._scope.run_id,
            extra={"stops_dispatch": True},
        )
        await self._dispatch.stop()

    async def _write(self, update: StepUpdate) -> None:
        await self._write_many([update])

    async def _write_many(self, updates: list[StepUpdate]) -> None:
        if not updates:
            return
        if not await self._call(self._scope.store.record_steps, self._scope.fence, updates):
            raise StepFencedOut(f"run {self._scope.run_id} attempt {self._scope.fence[1]} was taken over")
        self._recorded.update(update.step_key for update in updates)

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._db, fn, *args)


def _item_index(node: MapNode, record: StepRecord) -> int:
    if record.item_index is None or record.map_key != node.key:
        raise RuntimeError(f"next_map_item({node.key}) returned {record.step_key}, not an item of this map")
    return record.item_index


async def _stop(running: asyncio.Future[Any]) -> None:
    """Cancel a step's function and let it unwind (an async step runs its own cleanup) before
    going on; canceled meanwhile, stop waiting. A process step's process cannot be stopped: its
    result is dropped."""
    running.cancel()
    await asyncio.wait([running])
