"""`tidegate.App`: the entry point that ties tasks, the store and workers together."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Unpack, overload

from tidegate.app import settings
from tidegate.app.definitions import queue_declaration
from tidegate.app.handle import RunHandle
from tidegate.app.keywords import (
    STEP_DEFAULTS,
    StepKeywords,
    SubmitKeywords,
    TaskKeywords,
    WorkflowKeywords,
    check_keywords,
    definition_of,
)
from tidegate.app.registry import Registry
from tidegate.app.schedules import Schedules
from tidegate.app.steps import WorkflowTask, make_step
from tidegate.app.submit import SubmitKeys, Submitter, TaskOptions
from tidegate.app.tasks import Task
from tidegate.bootstrap import open_store
from tidegate.domain import names
from tidegate.domain.adaptive import Adaptive
from tidegate.domain.clock import Clock
from tidegate.domain.durations import parse_duration
from tidegate.domain.errors import ConfigurationError
from tidegate.domain.limits import Concurrency, Ordering, Partition, QueueConfig, RunQueueConfig
from tidegate.domain.model import NewRun, TaskDefinition
from tidegate.domain.named_rates import NamedRate
from tidegate.domain.rate_costs import check_declared
from tidegate.domain.rates import Rate
from tidegate.domain.schedules import MissedTicks
from tidegate.domain.steps import PoolConfig
from tidegate.domain.tunables import DEFAULT_MAX_WORKERS, DEFAULT_POOL_LEASE
from tidegate.engine.operators import pool_config, rate_config
from tidegate.storage.port import Store
from tidegate.storage.urls import parse_database_url, resolve_database_url
from tidegate.worker.loop import Worker
from tidegate.worker.settings import DrainMode, WorkerSettings
from tidegate.worker.startup import reach
from tidegate.workflow import Executor, Step


class App:
    """Tasks plus the database they run through.

    `database=None` means $TIDEGATE_DATABASE, else the embedded SQLite file
    `.tidegate/tidegate.db`. The store opens (and migrates, unless
    `migrate=False`) on first use, so defining tasks costs nothing.
    """

    def __init__(
        self,
        database: str | None = None,
        *,
        run_queue: RunQueueConfig | None = None,
        executor: Executor | None = None,
        migrate: bool = True,
        clock: Clock | None = None,
    ) -> None:
        self.database = resolve_database_url(database)
        parse_database_url(self.database)  # a malformed URL fails here, not at first use
        self.max_payload = settings.max_payload()  # the largest args of a run (and result, in its workers)
        if run_queue is not None and not isinstance(run_queue, RunQueueConfig):
            raise ConfigurationError(f"run_queue must be a tidegate.RunQueueConfig, got {run_queue!r}")
        if executor is not None and not isinstance(executor, Executor):
            raise ConfigurationError(f"executor must be a tidegate.Executor, got {executor!r}")
        # Workflows without an executor of their own use this one: serial in the worker unless
        # asked, so a step needs no process start-up and need not pickle.
        self.executor = executor or Executor.in_process()
        self._migrate = migrate
        # Where the store and the workers read time: tests move a ShiftedClock (or, through
        # tidegate.testing, the default clock of the apps built during a test).
        self.clock = clock = settings.default_clock() if clock is None else clock
        self._store: Store | None = None
        self._lock = threading.RLock()
        self._registry: Registry[Task] = Registry(lambda: self.store, self._lock, run_queue)
        self._submitter = Submitter(self._registry, lambda: self.store, self.database, self.max_payload, clock)
        self._overflow_callbacks: list[Callable[[int], None]] = []
        self._schedules = Schedules(lambda: self.store, self._lock, clock)

    @property
    def run_queue(self) -> RunQueueConfig | None:
        """The limits on all runs (`max_concurrent_runs`, `max_active`) this app declares."""
        return self._registry.run_queue

    # --- declaring tasks ------------------------------------------------------------

    @overload
    def task(self, fn: Callable[..., Any]) -> Task: ...

    @overload
    def task(self, fn: None = None, **options: Unpack[TaskKeywords]) -> Callable[[Callable[..., Any]], Task]: ...

    def task(
        self, fn: Callable[..., Any] | None = None, **options: Unpack[TaskKeywords]
    ) -> Task | Callable[[Callable[..., Any]], Task]:
        """Register a sync or async function as a task (usable with or without arguments); its
        keywords are `TaskKeywords` (name, queue, priority, tags, max_attempts, retry_backoff,
        timeout, dispatch_deadline, max_snoozes (default 100: `raise tidegate.Snooze` past it fails
        the run); `unique`: once per key for its runs, `tidegate.Unique`; `rate_cost`: what a start
        takes of its queue's rate, an int or a function of the args)."""
        check_keywords("task", options, TaskKeywords)

        def register(function: Callable[..., Any]) -> Task:
            definition = definition_of(function, options)
            if "rate_cost" in options:
                definition = replace(definition, rate_cost=check_declared(definition.name, options["rate_cost"]))
            return self._registry.add(Task(self._submitter, function, definition, options.get("unique")))

        return register(fn) if fn is not None else register

    @overload
    def step(self, fn: Callable[..., Any]) -> Step: ...

    @overload
    def step(self, fn: None = None, **options: Unpack[StepKeywords]) -> Callable[[Callable[..., Any]], Step]: ...

    def step(
        self, fn: Callable[..., Any] | None = None, **options: Unpack[StepKeywords]
    ) -> Step | Callable[[Callable[..., Any]], Step]:
        """Mark a function as a workflow step: its pool slots (`pool` + `pool_slots`, or `pools` with
        weights, claimed all or none), the named rates it pays (`rates={"warehouse_api": 1}`: taken
        with its slots in one transaction, all or none; see `set_rate_limit`) and its own retries.
        Its key in a run is `name` (default: the function's name), `name:2` for a second use,
        `name[3]` for item 3 of a map."""
        check_keywords("step", options, StepKeywords)
        merged: dict[str, Any] = {**STEP_DEFAULTS, **options}

        def register(function: Callable[..., Any]) -> Step:
            return make_step(
                function,
                name=merged.get("name"),
                pool=merged.get("pool"),
                pool_slots=merged.get("pool_slots"),
                pools=merged.get("pools"),
                max_attempts=merged["max_attempts"],
                retry_backoff=merged["retry_backoff"],
                rates=merged.get("rates"),
            )

        return register(fn) if fn is not None else register

    @overload
    def workflow(self, fn: Callable[..., Any]) -> WorkflowTask: ...

    @overload
    def workflow(
        self, fn: None = None, **options: Unpack[WorkflowKeywords]
    ) -> Callable[[Callable[..., Any]], WorkflowTask]: ...

    def workflow(
        self, fn: Callable[..., Any] | None = None, **options: Unpack[WorkflowKeywords]
    ) -> WorkflowTask | Callable[[Callable[..., Any]], WorkflowTask]:
        """Register a workflow: `fn(wf, **args)` builds its DAG with `wf.step` / `wf.map`.

        It is a task (submit, limits, retries and recovery as for any run: `TaskKeywords`); its
        steps run under `executor` (default: the app's).
        """
        check_keywords("workflow", options, WorkflowKeywords)
        executor = options.pop("executor", None)
        if executor is not None and not isinstance(executor, Executor):
            raise ConfigurationError(f"executor must be a tidegate.Executor, got {executor!r}")

        def register(function: Callable[..., Any]) -> WorkflowTask:
            definition = definition_of(function, options)
            task = WorkflowTask(self._submitter, function, definition, executor or self.executor)
            self._registry.add(task)
            return task

        return register(fn) if fn is not None else register

    def on_overflow(self, callback: Callable[[int], None]) -> Callable[[int], None]:
        """Call `callback(backlog)` when runs wait because every worker is full (an autoscaler hook).

        Raised at most once per `TIDEGATE_OVERFLOW_INTERVAL` across all workers,
        in the worker process that noticed; a failing callback is logged and
        never breaks dispatch. Usable as a decorator.
        """
        self._overflow_callbacks.append(callback)
        return callback

    def schedule(
        self,
        target: Task | str,
        cron: str | None = None,
        *,
        timezone: str = "UTC",
        args: Mapping[str, Any] | None = None,
        name: str | None = None,
        missed: MissedTicks = "skip",
    ) -> Any:
        """Submit a run of a task at each tick of a cron expression, in `timezone` (IANA; DST-correct).

        `app.schedule(task, cron="0 9 * * *", args={...})`, or as a decorator above `@app.task`:
        `@app.schedule("*/5 * * * *", timezone="Europe/Paris")`. Each tick submits exactly one run
        across all workers. `missed` says what happens to ticks due while no worker ran: "skip"
        fires only the latest of them, "catch_up" fires each (at most the latest 100). `name`
        (default: the task's) tells two schedules of one task apart. Returns the schedule's
        definition (the task, when used as a decorator).
        """
        return self._schedules.schedule(target, cron, timezone, args, name, missed, self._registry.get)

    def pause_schedule(self, name: str) -> bool:
        """Stop a stored schedule from firing (kept until resumed, whoever redeclares it); True if it changed."""
        return self._schedules.set_paused(name, True)

    def resume_schedule(self, name: str) -> bool:
        """Fire again from the next tick on (ticks of the pause are not made up); True if it changed."""
        return self._schedules.set_paused(name, False)

    @property
    def tasks(self) -> Mapping[str, Task]:
        return self._registry.tasks()

    def queue(
        self,
        name: str,
        *,
        concurrency: Concurrency | None = None,
        max_workers: int | None = None,
        ordering: Ordering = "priority",
        max_active: int | None = None,
        dispatch_deadline: str | float | None = None,
        rate: Rate | Sequence[Rate] | None = None,
        rate_partition: Partition | None = None,
        adaptive: Adaptive | None = None,
    ) -> QueueConfig:
        """Declare a queue and its limits; tasks (and `options(queue=...)`) may then use it.

        Several tasks may share one queue, and so its limits. `max_workers` caps
        how many of the queue's runs one worker takes at once; `max_active` is
        the admission ceiling on its queued + running runs; `dispatch_deadline`
        fails a run still queued that long after submission; `rate` bounds how
        many start per window (every window must allow), one budget per
        `rate_partition` (docs/rates.md); `adaptive` lets its concurrency limit (each
        partition's) follow its downstream's health between `Adaptive.min` and the declared
        limit (docs/how-to/snooze-and-adaptive.md).
        """
        config = queue_declaration(
            name, concurrency, max_workers, ordering, max_active, dispatch_deadline, rate, rate_partition, adaptive
        )
        self._registry.declare_queue(config)
        return config

    def queue_config(self, name: str) -> QueueConfig:
        """The declaration of a queue: from this app, else as registered in the store by another."""
        return self._registry.queue_config(name)

    # --- the store --------------------------------------------------------------------

    @property
    def store(self) -> Store:
        with self._lock:
            if self._store is None:
                check = settings.listen_check_interval()
                self._store = open_store(self.database, migrate=self._migrate, listen_check=check, clock=self.clock)
            return self._store

    def close(self) -> None:
        with self._lock:
            if self._store is not None:
                self._store.close()
                self._store = None
                self._registry.forget_persisted()
                self._schedules.forget_persisted()

    def asgi(self) -> Any:
        """The HTTP API over this app (a FastAPI application), e.g. to `mount` in your own service.

        Needs the `tidegate[service]` extra; imported here, not at module level, so that
        `import tidegate` never imports FastAPI.
        """
        from tidegate.api import create_api

        return create_api(self)

    async def aclose(self) -> None:
        """Release what the calling event loop holds (PostgreSQL: its async connection pool);
        `close` still closes the store."""
        with self._lock:
            store = self._store
        if store is not None:
            await store.submits.aclose()

    def __enter__(self) -> App:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- submitting -----------------------------------------------------------------

    def submit(self, task: str, args: Mapping[str, Any] | None = None, **options: Unpack[SubmitKeywords]) -> RunHandle:
        """Submit by task name: the code need not be importable here. The keys and `connection` are
        `Task.options`'s."""
        return self.options_for(task, **options).submit_many([{} if args is None else args])[0]

    async def submit_async(
        self, task: str, args: Mapping[str, Any] | None = None, **options: Unpack[SubmitKeywords]
    ) -> RunHandle:
        """`submit` from an event loop: the same checks and admission, awaited (PostgreSQL: no thread)."""
        definition = await self._submitter.definition_async(task)
        chosen = self._options(task, options, definition)
        return (await chosen.submit_many_async([{} if args is None else args]))[0]

    def options_for(self, task: str, **options: Unpack[SubmitKeywords]) -> TaskOptions:
        """Submit options for a task known by name (registered here, or by any worker before)."""
        return self._options(task, options)

    def _options(self, task: str, options: SubmitKeywords, definition: TaskDefinition | None = None) -> TaskOptions:
        keys = SubmitKeys(options.get("unique_key"), options.get("idempotency_key"), options.get("idempotency_ttl"))
        return self._submitter.options_for(
            task,
            priority=options.get("priority"),
            tags=options.get("tags"),
            queue=options.get("queue"),
            run_at=options.get("run_at"),
            concurrency_key=options.get("concurrency_key"),
            keys=keys,
            connection=options.get("connection"),
            definition=definition,
            rate_cost=options.get("rate_cost"),
        )

    def declare(self) -> None:
        """Write this app's task and limit declarations now (every submit and worker does on first
        use). Needed before `connection=` on SQLite when your transaction opens before this app's
        first use: SQLite has one writer."""
        self._registry.persist()

    def definition_of(self, task: str) -> TaskDefinition:
        """A task's defaults and parameters by name (this app's code, else the store), or `UnknownTask`
        naming the closest registered names."""
        return self._submitter.definition(task)

    def enqueue(self, runs: Sequence[NewRun]) -> list[RunHandle]:
        """Store runs built by `TaskOptions.new_runs`, of one task or several, in one transaction:
        all or none, admission checked for them together (the HTTP batch route's all-or-none).

        This app's task and limit declarations are written first, as for every submit,
        so the ceilings and limits its code declares are in force for these runs.
        """
        return self._submitter.enqueue(runs)

    async def enqueue_async(self, runs: Sequence[NewRun]) -> list[RunHandle]:
        """`enqueue` from an event loop."""
        return await self._submitter.enqueue_async(runs)

    def run(self, run_id: str) -> RunHandle:
        """A handle on an existing run."""
        return self._submitter.handle(run_id)

    def set_pool_limit(self, pool: str, limit: int, lease_duration: str | float = DEFAULT_POOL_LEASE) -> PoolConfig:
        """Declare pool `pool` in code: at most `limit` slots held at once (0 pauses it), each claim
        leased for `lease_duration` and renewed by its step. This is the default: a live change
        (`tidegate pools set`, the HTTP API) overrides it until `tidegate pools reset`, however often
        the code runs again. Bad input raises and changes nothing. Returns the value in force."""
        return pool_config.declare_pool_limit(self.store, pool, limit, lease_duration)

    def set_rate_limit(
        self,
        name: str,
        limit: int | Rate | Sequence[Rate],
        per: str | float | None = None,
        *,
        burst: int | None = None,
    ) -> NamedRate:
        """Declare the named rate `name` in code: at most `limit` starts (cost units) in any window of
        `per` (`set_rate_limit("warehouse_api", 100, per="1s")`), or several windows, each of which
        must allow a start (`[Rate(100, "1s"), Rate(5_000, "1h")]`). Steps pay it with
        `@app.step(rates={"warehouse_api": 1})`, in the transaction that takes their pool slots,
        all or none; its budget is in the database, shared by every worker. This is the default: a
        live change (`tidegate rates set`, the HTTP API) overrides it until `tidegate rates reset`.
        Bad input raises and changes nothing. Returns the rate in force."""
        return rate_config.declare_rate_limit(self.store, name, limit, per, burst)

    # --- working --------------------------------------------------------------------

    def worker(
        self,
        *,
        queues: Sequence[str] | None = None,
        max_workers: int = DEFAULT_MAX_WORKERS,
        drain: DrainMode = False,
        lease_duration: str | float | None = None,
        poll_interval: str | float | None = None,
        shutdown_grace: str | float | None = None,
        fill_order: bool = False,
        max_idle: str | float | None = None,
        startup_wait: str | float | None = None,
    ) -> Worker:
        """A worker for this app's tasks; `run()` blocks, `start()` runs it in a thread.

        `fill_order=True` joins the leaky-bucket fill order (claim only when every
        lower-ranked worker is full); `max_idle` lets the worker exit after being
        idle that long; `drain` too: once its queues are empty (True), or once
        nothing due now can be claimed ("due"). A PostgreSQL server that does not
        answer is tried again for `startup_wait` (`worker.startup`) before this fails.
        """
        settings.check_environment()
        lease = settings.duration_setting("TIDEGATE_LEASE_DURATION", lease_duration, label="lease_duration")
        chosen = tuple(queues) if queues else self._registry.task_queues()
        for queue in chosen:
            names.check_name("queue", queue)
        worker_settings = WorkerSettings(
            queues=chosen,
            max_workers=max_workers,
            drain=drain,
            lease_duration=lease,
            poll_interval=settings.duration_setting("TIDEGATE_POLL_INTERVAL", poll_interval, label="poll_interval"),
            sweep_interval=settings.sweep_interval(lease),
            cancel_grace=settings.duration_setting("TIDEGATE_CANCEL_GRACE"),
            shutdown_grace=settings.duration_setting("TIDEGATE_SHUTDOWN_GRACE", shutdown_grace, label="shutdown_grace"),
            claim_policy=settings.claim_policy(),
            fill_order=fill_order,
            max_idle=None if max_idle is None else parse_duration(max_idle, name="max_idle"),
            overflow_interval=settings.duration_setting("TIDEGATE_OVERFLOW_INTERVAL"),
            max_payload=self.max_payload,
            retention=settings.duration_setting("TIDEGATE_RETENTION"),
            startup_wait=settings.duration_setting("TIDEGATE_STARTUP_WAIT", startup_wait, label="startup_wait"),
        )
        began = self.clock.monotonic()
        store = reach(lambda: self.store, worker_settings.startup_wait, clock=self.clock)
        worker = Worker(
            store,
            self._registry.functions(),
            worker_settings,
            on_overflow=list(self._overflow_callbacks),
            clock=self.clock,
        )
        left = worker_settings.startup_wait - (self.clock.monotonic() - began)
        reach(lambda: self._persist(worker.id), max(0.0, left), clock=self.clock)
        return worker

    def _persist(self, worker_id: str) -> None:
        self._registry.persist(worker_id)  # every task, as last registered by this worker
        self._schedules.persist()
