"""Submitting: a Python call becomes a stored run.

Everything a run needs is validated here, before the store is touched, so a
bad submit raises a clear error and stores nothing. `TaskOptions` builds the
runs; a `RunTarget` (the app's `Submitter`) says where they go.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from tidegate.app.callers import driver_connection, driver_connection_async
from tidegate.app.handle import RunHandle
from tidegate.app.registry import Registered, Registry
from tidegate.domain import names
from tidegate.domain.clock import Clock
from tidegate.domain.durations import MAX_DURATION
from tidegate.domain.errors import InvalidArgument
from tidegate.domain.jsonvalue import ensure_json, ensure_size
from tidegate.domain.keys import RunKey
from tidegate.domain.limits import QueueConfig
from tidegate.domain.model import NewRun, TaskDefinition
from tidegate.domain.parameters import check_args
from tidegate.domain.rate_costs import cost_of
from tidegate.domain.run_ids import new_run_id
from tidegate.domain.scopes import partition_of, rate_partition_of
from tidegate.domain.suggest import unknown_task
from tidegate.domain.unique import DEFAULT_UNIQUE, Admission, DuplicateRun, check_key, idempotency_run_key
from tidegate.engine.runtime import tracing
from tidegate.storage.port import Store
from tidegate.storage.urls import masked

log = logging.getLogger("tidegate.submit")  # one DEBUG line per run stored (`run.submitted`)
UNSET: Any = object()  # an option not given: the task's default applies


class RunTarget(Protocol):
    """Where submitted runs go, and what their checks need to know."""

    @property
    def max_payload(self) -> int: ...

    @property
    def clock(self) -> Clock: ...

    def queue_config(self, name: str) -> QueueConfig: ...

    def enqueue(self, runs: Sequence[NewRun], connection: Any = None) -> list[RunHandle]: ...

    async def enqueue_async(self, runs: Sequence[NewRun], connection: Any = None) -> list[RunHandle]: ...


class TaskOptions:
    """A task with per-submit options; `submit` stores a run with them."""

    def __init__(
        self,
        target: RunTarget,
        definition: TaskDefinition,
        priority: int,
        tags: Mapping[str, str] | None,
        queue: str,
        run_at: datetime | timedelta | None,
        concurrency_key: str | None,
        keys: SubmitKeys | None = None,
        connection: Any = None,
        rate_cost: int | None = None,
    ) -> None:
        """`definition.parameters` checks every run's args: described from the code here, or as the
        app that has the code registered them (a task registered without them is not checked).
        `connection`: the caller's own, whose open transaction the runs are written in (see `Task.options`).
        `rate_cost`: the cost of these runs to their queue's rate, instead of the task's (domain/rate_costs.py)."""
        self._target = target
        self._definition = definition
        self._priority = definition.priority if priority is UNSET else names.check_priority(priority)
        self._tags = {**definition.tags, **names.check_tags(tags)}
        self._queue = definition.queue if queue is UNSET else names.check_name("queue", queue)
        self._run_at = _check_run_at(run_at)
        self._concurrency_key = names.check_concurrency_key(concurrency_key)
        self._keys = (keys or SubmitKeys()).checked(definition)
        self._connection = connection
        self._rate_cost = rate_cost

    def submit(self, **args: Any) -> RunHandle:
        return self.submit_many([args])[0]

    def submit_many(self, many_args: Iterable[Mapping[str, Any]]) -> list[RunHandle]:
        return self._target.enqueue(self.new_runs(many_args), self._connection)

    async def submit_async(self, **args: Any) -> RunHandle:
        """`submit` from an event loop: the same checks and admission, awaited."""
        return (await self.submit_many_async([args]))[0]

    async def submit_many_async(self, many_args: Iterable[Mapping[str, Any]]) -> list[RunHandle]:
        return await self._target.enqueue_async(self.new_runs(many_args), self._connection)

    def new_runs(self, many_args: Iterable[Mapping[str, Any]]) -> list[NewRun]:
        """The runs `submit_many` would store, built and checked but not stored.

        Public for a caller that stores the runs of several tasks in one transaction
        (the HTTP batch route): it builds each task's runs here, then hands them all
        to `App.enqueue`, so a bad item stores nothing of the batch.
        """
        queue_config = self._target.queue_config(self._queue)  # an undeclared queue fails here
        return [self._new_run(args, queue_config) for args in many_args]

    def due_in(self) -> float:
        """Seconds from now until a run submitted now is due; raises if `run_at` is out of range.

        Public so that a caller checking a request field by field (the HTTP API)
        can name `run_at` as the field at fault, with the one rule runs are built by.
        """
        return _delay_until(self._run_at, self._target.clock)

    def _new_run(self, args: Mapping[str, Any], queue_config: QueueConfig) -> NewRun:
        if not isinstance(args, Mapping):
            raise InvalidArgument(f"{self._definition.name}: args must be a dict, got {type(args).__name__}")
        limit = self._target.max_payload
        at_most = 2
        for key, value in args.items():
            if not isinstance(key, str):
                raise InvalidArgument(f"{self._definition.name}: argument names must be strings, got {key!r}")
            at_most += ensure_json(key, f"{self._definition.name}: argument name {key[:20]!r}") + 2
            at_most += ensure_json(value, f"{self._definition.name}: argument {key!r}", max_bytes=limit)
        if self._definition.parameters is not None:
            check_args(self._definition.name, self._definition.parameters, args)
        ensure_size(dict(args), f"{self._definition.name}: args", limit, at_most=at_most)
        keyed = self._keys.key_of(self._definition, self._queue, args)
        delay = self.due_in()
        if keyed is not None and keyed.debounce is not None:
            delay = max(delay, keyed.debounce)  # held for the debounce after the last submit of its key
        return NewRun(
            id=new_run_id(),
            task=self._definition.name,
            queue=self._queue,
            partition=partition_of(queue_config, self._definition.name, args, self._concurrency_key),
            rate_partition=rate_partition_of(queue_config, self._definition.name, args),
            rate_cost=cost_of(
                self._definition.name, self._definition.rate_cost, self._rate_cost, args, queue_config.rate
            ),
            args=dict(args),
            priority=self._priority,
            tags=self._tags,
            concurrency_key=self._concurrency_key,
            max_attempts=self._definition.max_attempts,
            retry_backoff=self._definition.retry_backoff,
            timeout=self._definition.timeout,
            delay=delay,
            deadline=(
                self._definition.dispatch_deadline
                if self._definition.dispatch_deadline is not None
                else queue_config.dispatch_deadline
            ),
            unique=keyed,
        )


class Submitter:
    """The app's `RunTarget`: registers its declarations, then enqueues in one transaction."""

    def __init__(
        self, registry: Registry[Any], store: Callable[[], Store], database: str, max_payload: int, clock: Clock
    ) -> None:
        self._registry = registry
        self._store = store
        self._database = database
        self.max_payload = max_payload
        self.clock = clock

    def queue_config(self, name: str) -> QueueConfig:
        return self._registry.queue_config(name)

    def enqueue(self, runs: Sequence[NewRun], connection: Any = None) -> list[RunHandle]:
        """Store the runs (all or none); a batch with a unique or idempotency key goes the keyed way,
        and a run that met its key's holder is answered with the holder's handle (`duplicate`).
        With `connection`, in the caller's open transaction, left for the caller to commit."""
        if connection is not None:
            connection = driver_connection(connection)
        store = self._ready(connection)
        if not runs:
            return []
        if tracing.off():  # no span to open: the common case pays for no context manager
            return self._answered(store, runs, self._stored(store, connection, runs))
        with tracing.submitting(runs) as traced:
            admitted = self._stored(store, connection, traced)
        return self._answered(store, runs, admitted)

    def _stored(self, store: Store, connection: Any, runs: Sequence[NewRun]) -> list[Admission]:
        """`enqueue`'s write: in the caller's transaction, the plain way, or the keyed way."""
        if connection is not None:
            return self._admitted(lambda: store.submits.enqueue_in(connection, runs))
        for run in runs:
            if run.unique is not None:
                return self._admitted(lambda: store.enqueue_unique(runs))
        store.enqueue(runs)
        return [Admission(run.id) for run in runs]

    async def enqueue_async(self, runs: Sequence[NewRun], connection: Any = None) -> list[RunHandle]:
        """`enqueue` from an event loop, by the same statements and decisions."""
        connection = await driver_connection_async(connection)
        store = self._ready(connection)
        submits = store.submits
        if not runs:
            return []
        with tracing.submitting(runs) as traced:
            try:
                if connection is None:
                    admitted = await submits.enqueue_async(traced)
                else:
                    admitted = await submits.enqueue_in_async(connection, traced)
            except DuplicateRun as error:
                error.handle = self.handle(error.run_id, duplicate=True)
                raise
        return self._answered(store, runs, admitted)

    def _admitted(self, admit: Callable[[], list[Admission]]) -> list[Admission]:
        try:
            return admit()
        except DuplicateRun as error:
            error.handle = self.handle(error.run_id, duplicate=True)
            raise

    def _answered(self, store: Store, runs: Sequence[NewRun], admitted: list[Admission]) -> list[RunHandle]:
        """Each run's handle (the holder's for a duplicate); a DEBUG line per run stored."""
        if log.isEnabledFor(logging.DEBUG):
            stored = {run.id: run for run in runs}
            for run in (
                stored[answer.run_id] for answer in admitted if not answer.duplicate and answer.run_id in stored
            ):
                fields = {"event": "run.submitted", "run_id": run.id, "task": run.task, "queue": run.queue}
                log.debug("run %s task=%s submitted to queue %s", run.id, run.task, run.queue, extra=fields)
        return [RunHandle(store, answer.run_id, clock=self.clock, duplicate=answer.duplicate) for answer in admitted]

    def _ready(self, connection: Any) -> Store:
        """The store, with this app's declarations written (its ceilings must be there to be counted)."""
        store = self._store()
        if connection is not None and self._registry.pending() and store.submits.shares_writer(connection):
            raise InvalidArgument(
                "this app's task and limit declarations are not stored yet, and SQLite has one writer, which "
                "connection='s open transaction may hold: call app.declare() before opening it"
            )
        self._registry.persist()
        return store

    def handle(self, run_id: str, *, duplicate: bool = False) -> RunHandle:
        return RunHandle(self._store(), run_id, clock=self.clock, duplicate=duplicate)

    def options_for(
        self,
        task: str,
        *,
        priority: int | None,
        tags: Mapping[str, str] | None,
        queue: str | None,
        run_at: datetime | timedelta | None,
        concurrency_key: str | None,
        keys: SubmitKeys | None = None,
        connection: Any = None,
        definition: TaskDefinition | None = None,
        rate_cost: int | None = None,
    ) -> TaskOptions:
        """Submit options for a task known by name (registered here, or by any worker before);
        `definition`: the task's, when the caller already read it (`definition_async`)."""
        definition = self.definition(task) if definition is None else definition
        return TaskOptions(
            self,
            definition,
            definition.priority if priority is None else priority,
            tags,
            definition.queue if queue is None else queue,
            run_at,
            concurrency_key,
            keys=keys,
            connection=connection,
            rate_cost=rate_cost,
        )

    async def definition_async(self, task: str) -> TaskDefinition:
        """`definition` from an event loop: this app's code, else the store read asynchronously."""
        known: Registered | None = self._registry.get(task)
        if known is not None:
            return known.definition
        definition = await self._store().submits.get_task_async(names.check_name("task", task))
        return self.definition(task) if definition is None else definition  # unknown: the sync answer names

    def definition(self, task: str) -> TaskDefinition:
        """A task's defaults and parameters by name: from this app's code, else as registered in the store.

        The one lookup of every submit by name (Python, CLI, HTTP): an unknown name is
        answered with the closest registered ones.
        """
        known: Registered | None = self._registry.get(task)
        if known is not None:
            return known.definition
        definition = self._store().get_task(names.check_name("task", task))
        if definition is None:
            registered = [registration.definition.name for registration in self._store().list_tasks()]
            raise unknown_task(task, [*self._registry.tasks(), *registered], masked(self._database))
        return definition


@dataclass(frozen=True, slots=True)
class SubmitKeys:
    """A submit's `unique_key`, `idempotency_key` and `idempotency_ttl` (see `Task.options`)."""

    unique_key: str | None = None
    idempotency_key: str | None = None
    idempotency_ttl: str | float | None = None

    def checked(self, definition: TaskDefinition) -> SubmitKeys:
        """These keys, or a clear error naming the option at fault (checked once, before any run is built)."""
        if self.unique_key is not None:
            check_key(self.unique_key, "unique_key")
            if self.idempotency_key is not None:
                raise InvalidArgument("give unique_key or idempotency_key, not both")
        if self.idempotency_key is not None:
            idempotency_run_key(definition.name, self.idempotency_key, self.idempotency_ttl)
        elif self.idempotency_ttl is not None:
            raise InvalidArgument("idempotency_ttl needs an idempotency_key")
        return self

    def key_of(self, definition: TaskDefinition, queue: str, args: Mapping[str, Any]) -> RunKey | None:
        """The run's key: its idempotency key's, else its task's `Unique` rule's (the default rule
        when only a `unique_key` is given), else none."""
        if self.idempotency_key is not None:
            return idempotency_run_key(definition.name, self.idempotency_key, self.idempotency_ttl)
        rule = definition.unique
        if rule is None and self.unique_key is not None:
            rule = DEFAULT_UNIQUE
        return None if rule is None else rule.key_of(definition.name, queue, args, self.unique_key)


def _check_run_at(run_at: Any) -> datetime | timedelta | None:
    if run_at is None or isinstance(run_at, (datetime, timedelta)):
        return run_at
    raise InvalidArgument(f"run_at must be a datetime or a timedelta, got {run_at!r}")


def _delay_until(run_at: datetime | timedelta | None, clock: Clock) -> float:
    """Seconds from now (the clock's); the store adds them to its own clock. At most MAX_DURATION
    (100 years): a time further away would overflow the dates the stores hand back."""
    if run_at is None:
        return 0.0
    if isinstance(run_at, timedelta):
        delay = max(0.0, run_at.total_seconds())
    else:
        try:
            aware = run_at if run_at.tzinfo is not None else run_at.astimezone()
            delay = max(0.0, aware.timestamp() - clock.wall())
        except (OverflowError, ValueError):  # a naive date at the edge of the calendar
            raise InvalidArgument(f"run_at {run_at!r} is out of range") from None
    if delay > MAX_DURATION:
        raise InvalidArgument(f"run_at {run_at!r} is out of range: at most 100 years from now")
    return delay
