"""The Store port's verbs, each handed to the aggregate that owns it.

Both adapters are built alike: one object per aggregate (schema, runs,
limits, queues, workers, claims, pools, steps, leases) over one shared database
object, each implementing one role of `storage/port.py` (declared, so mypy
checks both dialects against it). So the facade is written once, here, typed
by those roles; an adapter builds its aggregates and adds only what differs by
dialect: its wake-ups (`listen`, and how a verb's wake-up is sent) and its
connections (`close`), and names its connection type (`AggregateStore[sqlite3.Connection]`), so
nothing here is typed `Any`. The verbs of `port.WAKES` get their wake-ups here.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Concatenate, Generic, ParamSpec, Protocol, TypeVar

from tidegate.domain.backpressure import Pace
from tidegate.domain.blocking import QueuedShape
from tidegate.domain.children import ChildRecord, TriggerAnswer, TriggerRequest
from tidegate.domain.doctor import DatabaseFacts
from tidegate.domain.limits import QueueConfig, RunQueueConfig
from tidegate.domain.model import (
    CycleRequest,
    CycleResult,
    EventRecord,
    HolderRecord,
    LimitChange,
    LimitOverride,
    NewRun,
    QueueCounts,
    RunRecord,
    RunStatus,
    SweepReport,
    TaskDefinition,
    TaskRegistration,
    WorkerRecord,
    WorkerRegistration,
)
from tidegate.domain.named_rates import NamedRate
from tidegate.domain.rates import Rate, RateStates
from tidegate.domain.retention import PruneReport
from tidegate.domain.schedules import Firing, NewSchedule, ScheduleRecord
from tidegate.domain.scopes import Rules
from tidegate.domain.steps import (
    FinishStepRequest,
    PoolConfig,
    PoolStatus,
    PoolWaiter,
    SlotGrant,
    SlotRequest,
    StepFinish,
    StepRecord,
    StepUpdate,
)
from tidegate.domain.unique import Admission
from tidegate.storage import port
from tidegate.storage.port import WAKES, Fence
from tidegate.storage.shared import wakes

# What a dialect's connection factory gives: a sqlite3 connection, or a context manager of a
# pooled psycopg one. Each adapter names its own, so mypy checks what tests/races.py swaps in.
ConnectionT = TypeVar("ConnectionT")
Params = ParamSpec("Params")
Result = TypeVar("Result")


class DialectDatabase(Protocol[ConnectionT]):
    """What the façade reaches of a dialect's Database: its connection factory and named SQL."""

    connection: Callable[[], ConnectionT]
    queries: dict[str, str]


class AggregateStore(Generic[ConnectionT]):
    """Delegates every verb to the aggregate that owns it, each typed by the role it implements."""

    _db: DialectDatabase[ConnectionT]
    _schema: port.SchemaVerbs
    _runs: port.RunVerbs
    _unique: port.UniqueVerbs
    _browse: port.BrowseVerbs
    _retries: port.RetryVerbs
    _activity: port.ActivityVerbs
    _telemetry: port.TelemetryVerbs
    _limits: port.LimitVerbs
    _queues: port.QueueVerbs
    _workers: port.WorkerVerbs
    _claims: port.ClaimVerbs
    _look: port.LookVerbs
    _children: port.ChildVerbs
    _pools: port.PoolVerbs
    _named_rates: port.NamedRateVerbs
    _steps: port.StepVerbs
    _leases: port.LeaseVerbs
    _schedules: port.ScheduleVerbs
    _retention: port.RetentionVerbs
    _health: port.HealthVerbs

    # --- the shared connection and queries (tests/races.py replaces them) ----------

    @property
    def _connection(self) -> Callable[[], ConnectionT]:
        return self._db.connection

    @_connection.setter
    def _connection(self, connection: Callable[[], ConnectionT]) -> None:
        self._db.connection = connection

    @property
    def _queries(self) -> dict[str, str]:
        return self._db.queries

    @_queries.setter
    def _queries(self, queries: dict[str, str]) -> None:
        self._db.queries = queries

    def _send_wake(self, wake: wakes.Wake) -> None:
        """After a verb of `WAKES` returned: send what it still owes (PostgreSQL sent it at commit)."""

    # --- schema ----------------------------------------------------------------

    def migrate(self) -> list[int]:
        return self._schema.migrate()

    def schema_version(self) -> int:
        return self._schema.schema_version()

    def check_schema(self) -> None:
        return self._schema.check_schema()

    # --- runs ------------------------------------------------------------------

    def register_tasks(self, tasks: Sequence[TaskDefinition], worker_id: str | None = None) -> None:
        return self._runs.register_tasks(tasks, worker_id)

    def get_task(self, name: str) -> TaskDefinition | None:
        return self._runs.get_task(name)

    def list_tasks(self) -> list[TaskRegistration]:
        return self._runs.list_tasks()

    def enqueue(self, runs: Sequence[NewRun]) -> None:
        return self._runs.enqueue(runs)

    def enqueue_unique(self, runs: Sequence[NewRun]) -> list[Admission]:
        return self._unique.enqueue_unique(runs)

    def cancel_run(self, run_id: str) -> RunStatus:
        return self._children.cancel_run(run_id)

    def trigger_children(self, request: TriggerRequest) -> TriggerAnswer:
        return self._children.trigger_children(request)

    def run_children(self, run_id: str) -> list[ChildRecord]:
        return self._children.run_children(run_id)

    def pending_count(self, queues: Sequence[str]) -> int:
        return self._runs.pending_count(queues)

    def get_run(self, run_id: str) -> RunRecord | None:
        return self._runs.get_run(run_id)

    def page_runs(
        self,
        *,
        status: RunStatus | None = None,
        queue: str | None = None,
        task: str | None = None,
        tags: Mapping[str, str] | None = None,
        before: str | None = None,
        limit: int = 100,
    ) -> list[RunRecord]:
        return self._browse.page_runs(status=status, queue=queue, task=task, tags=tags, before=before, limit=limit)

    def run_events(self, run_id: str) -> list[EventRecord]:
        return self._runs.run_events(run_id)

    def status_counts(self, queue: str | None = None) -> dict[RunStatus, int]:
        return self._runs.status_counts(queue)

    def list_queued(self, queue: str | None = None, limit: int = 100) -> list[RunRecord]:
        return self._runs.list_queued(queue, limit)

    def events_after(self, after: int, limit: int) -> list[EventRecord]:
        return self._telemetry.events_after(after, limit)

    def latest_events(self, kind: str, limit: int) -> list[EventRecord]:
        return self._telemetry.latest_events(kind, limit)

    def last_event_id(self) -> int:
        return self._telemetry.last_event_id()

    def queued_shapes(self) -> list[QueuedShape]:
        return self._telemetry.queued_shapes()

    def run_counts(self) -> dict[tuple[str, RunStatus], int]:
        return self._telemetry.run_counts()

    def queue_position(self, run_id: str) -> tuple[int, int]:
        return self._runs.queue_position(run_id)

    # --- operators -------------------------------------------------------------

    def retry_run(self, run_id: str) -> RunRecord:
        return self._retries.retry_run(run_id)

    def list_workers(self) -> list[WorkerRecord]:
        return self._activity.list_workers()

    def finished_count(
        self,
        within: float,
        *,
        queue: str | None = None,
        partition: str | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> int:
        return self._activity.finished_count(within, queue=queue, partition=partition, tags=tags)

    def run_pace(
        self,
        within: float,
        *,
        queue: str | None = None,
        partition: str | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> Pace:
        return self._activity.run_pace(within, queue=queue, partition=partition, tags=tags)

    # --- claims ----------------------------------------------------------------

    def cycle(self, request: CycleRequest) -> CycleResult:
        return self._claims.cycle(request)

    def peek_cycle(self, worker_id: str, queues: Sequence[str]) -> CycleResult | None:
        return self._look.peek_cycle(worker_id, queues)

    # --- leases and sweep ------------------------------------------------------

    def renew_leases(self, worker_id: str, held: Sequence[Fence], lease_seconds: float) -> list[Fence]:
        return self._leases.renew_leases(worker_id, held, lease_seconds)

    def hand_back(self, worker_id: str, held: Sequence[Fence]) -> list[str]:
        return self._leases.hand_back(worker_id, held)

    def report_cost(self, worker_id: str, fence: Fence, cost: int) -> bool:
        return self._leases.report_cost(worker_id, fence, cost)

    def sweep(self, sweeper_id: str, interval: float) -> SweepReport | None:
        return self._leases.sweep(sweeper_id, interval)

    # --- workers ---------------------------------------------------------------

    def register_worker(self, registration: WorkerRegistration) -> int:
        return self._workers.register_worker(registration)

    def heartbeat_worker(self, worker_id: str, ttl: float) -> bool:
        return self._workers.heartbeat_worker(worker_id, ttl)

    def deregister_worker(self, worker_id: str) -> None:
        return self._workers.deregister_worker(worker_id)

    def check_overflow(self, worker_id: str, queues: Sequence[str], interval: float) -> int | None:
        return self._workers.check_overflow(worker_id, queues, interval)

    # --- rules and limits ------------------------------------------------------

    def register_limits(
        self, run_queue: RunQueueConfig | None, queues: Sequence[QueueConfig], implied_queues: Sequence[str]
    ) -> None:
        return self._limits.register_limits(run_queue, queues, implied_queues)

    def rules(self) -> Rules:
        return self._limits.rules()

    def set_limit(self, target: str, limit: int | None) -> LimitChange:
        return self._limits.set_limit(target, limit)

    def reset_limit(self, target: str) -> LimitChange:
        return self._limits.reset_limit(target)

    def limit_overrides(self) -> list[LimitOverride]:
        return self._limits.limit_overrides()

    def scope_usage(self) -> dict[str, int]:
        return self._limits.scope_usage()

    def rate_states(self) -> RateStates:
        return self._limits.rate_states()

    def scope_holders(self, scope: str) -> list[HolderRecord]:
        return self._limits.scope_holders(scope)

    # --- queues ------------------------------------------------------------------

    def queue_counts(self) -> dict[str, QueueCounts]:
        return self._queues.queue_counts()

    def set_queue_paused(self, queue: str, paused: bool) -> bool:
        return self._queues.set_queue_paused(queue, paused)

    # --- pools and steps ---------------------------------------------------------

    def declare_pool(self, pool: str, limit: int, lease_seconds: float) -> PoolConfig:
        return self._pools.declare_pool(pool, limit, lease_seconds)

    def set_pool_limit(self, pool: str, limit: int, lease_seconds: float) -> PoolConfig:
        return self._pools.set_pool_limit(pool, limit, lease_seconds)

    def reset_pool_limit(self, pool: str) -> PoolConfig | None:
        return self._pools.reset_pool_limit(pool)

    def pools(self) -> list[PoolStatus]:
        return self._pools.pools()

    def pool_holders(self, pool: str) -> list[HolderRecord]:
        return self._pools.pool_holders(pool)

    def pool_waiters(self, pool: str) -> list[PoolWaiter]:
        return self._pools.pool_waiters(pool)

    def declare_named_rate(self, name: str, windows: tuple[Rate, ...]) -> NamedRate:
        return self._named_rates.declare_named_rate(name, windows)

    def set_named_rate(self, name: str, windows: tuple[Rate, ...]) -> NamedRate:
        return self._named_rates.set_named_rate(name, windows)

    def reset_named_rate(self, name: str) -> NamedRate | None:
        return self._named_rates.reset_named_rate(name)

    def named_rates(self) -> list[NamedRate]:
        return self._named_rates.named_rates()

    def acquire_slots(self, fence: Fence, worker_id: str, request: SlotRequest) -> SlotGrant:
        return self._steps.acquire_slots(fence, worker_id, request)

    def acquire_many(
        self, fence: Fence, worker_id: str, requests: Sequence[SlotRequest], strict: bool = False
    ) -> list[SlotGrant] | None:
        return self._steps.acquire_many(fence, worker_id, requests, strict)

    def renew_slots(self, fence: Fence, step_key: str) -> bool:
        return self._steps.renew_slots(fence, step_key)

    def release_slots(self, fence: Fence, step_key: str) -> None:
        return self._steps.release_slots(fence, step_key)

    def record_steps(self, fence: Fence, steps: Sequence[StepUpdate]) -> bool:
        return self._steps.record_steps(fence, steps)

    def finish_step(self, request: FinishStepRequest) -> StepFinish:
        return self._steps.finish_step(request)

    def run_steps(self, run_id: str) -> list[StepRecord]:
        return self._steps.run_steps(run_id)

    def next_map_item(self, fence: Fence, worker_id: str, map_key: str, window: int) -> StepRecord | None:
        return self._steps.next_map_item(fence, worker_id, map_key, window)

    # --- schedules and retention -------------------------------------------------

    def register_schedules(self, schedules: Sequence[NewSchedule]) -> None:
        return self._schedules.register_schedules(schedules)

    def list_schedules(self) -> list[ScheduleRecord]:
        return self._schedules.list_schedules()

    def due_schedules(self) -> tuple[datetime, list[ScheduleRecord]]:
        return self._schedules.due_schedules()

    def fire_schedule(self, firing: Firing) -> list[str]:
        return self._schedules.fire_schedule(firing)

    def set_schedule_paused(self, name: str, paused: bool, next_fire_at: datetime | None = None) -> bool:
        return self._schedules.set_schedule_paused(name, paused, next_fire_at)

    def remove_schedule(self, name: str) -> None:
        return self._schedules.remove_schedule(name)

    def prune_runs(self, older_than: float, limit: int) -> PruneReport:
        return self._retention.prune_runs(older_than, limit)

    # --- the doctor ----------------------------------------------------------------

    def doctor_facts(self, retention: float) -> DatabaseFacts:
        return self._health.doctor_facts(retention)


class _SendsWakes(Protocol):
    """What a waking verb needs of its store: `AggregateStore._send_wake`."""

    def _send_wake(self, wake: wakes.Wake) -> None: ...


def _waking(
    verb: str, method: Callable[Concatenate[_SendsWakes, Params], Result]
) -> Callable[Concatenate[_SendsWakes, Params], Result]:
    """`method` with the wake-up of `verb` opened around it and sent once it returns."""

    @functools.wraps(method)
    def call(self: _SendsWakes, /, *args: Params.args, **kwargs: Params.kwargs) -> Result:
        with wakes.Wake(verb) as wake:
            result = method(self, *args, **kwargs)
        self._send_wake(wake)
        return result

    return call


# The one place the table's verbs get their wake-ups: being in `WAKES` is what makes a verb wake.
for _verb in WAKES:
    setattr(AggregateStore, _verb, _waking(_verb, getattr(AggregateStore, _verb)))
