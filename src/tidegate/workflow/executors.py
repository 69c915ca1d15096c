"""Executors: where a workflow's steps run, and how many of one run at once.

`Executor.in_process()` runs one step at a time inside the worker (sync steps
on a daemon thread, so the worker's loop stays free). `Executor.parallel()`
runs sync steps on a loky process pool and async steps as tasks on the
worker's loop. loky ships each function with cloudpickle in memory; nothing
is ever stored pickled (outputs are JSON). `Executor.kubernetes()` runs each
step (sync or async) as a Kubernetes Job (`tidegate.workflow.kubernetes`),
at most `max_concurrent_steps` of one run at once.

Starting processes is slow, so there is one pool per worker process, reused
by every run (and every worker thread) and grown to the largest cap seen;
each run's cap is its own semaphore (`RunCaps`), so two runs on one worker
each get their cap of the shared pool rather than a cap between them.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping
from concurrent.futures import Future
from concurrent.futures.process import BrokenProcessPool
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import loky

from tidegate.domain.errors import ConfigurationError
from tidegate.domain.steps import StepUpdate
from tidegate.workflow.kubernetes.spec import KubernetesSpec


@dataclass(frozen=True)
class Executor:
    """How a workflow run executes its steps (set per workflow, with an app-wide default)."""

    kind: Literal["in_process", "parallel", "kubernetes"]
    max_workers: int | None = None  # for kubernetes: max_concurrent_steps (None: unbounded)
    max_async_concurrent: int | None = None
    pods: KubernetesSpec | None = None  # Executor.kubernetes(): the Job template of its steps

    @classmethod
    def in_process(cls) -> Executor:
        """Steps run one at a time in the worker: no processes, nothing needs to pickle."""
        return cls("in_process")

    @classmethod
    def parallel(cls, max_workers: int | None = None, max_async_concurrent: int | None = None) -> Executor:
        """Sync steps on up to `max_workers` processes (None: the CPUs this process may use),
        async steps on the worker's loop, up to `max_async_concurrent` (None: no cap)."""
        for name, value in (("max_workers", max_workers), ("max_async_concurrent", max_async_concurrent)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ConfigurationError(f"{name} must be an integer >= 1 or None, got {value!r}")
        return cls("parallel", max_workers, max_async_concurrent)

    @classmethod
    def kubernetes(
        cls,
        image: str,
        *,
        store_secret: str,
        namespace: str = "default",
        max_concurrent_steps: int | None = None,
        store_secret_key: str = "url",
        resources: Mapping[str, str] | None = None,
        service_account: str | None = None,
        active_deadline_seconds: int | None = None,
        image_pull_policy: str | None = None,
        env: Mapping[str, str] | None = None,
        kubeconfig: str | None = None,
        context: str | None = None,
        poll_seconds: float | None = None,
        watch_seconds: int | None = None,
    ) -> Executor:
        """Each step (sync or async) runs as one Kubernetes Job per try, at most `max_concurrent_steps`
        of a run at once (None: no cap), stacked with pools and windows like `max_workers`.

        The pod runs `python -m tidegate.steppod` from `image` (which must hold tidegate and the
        workflow's module); it reads the database URL from key `store_secret_key` of Secret
        `store_secret` in `namespace`. `resources` are the container's requests and limits;
        the cluster's config (in-cluster, else `kubeconfig`/`context`) loads at the first step.
        """
        if max_concurrent_steps is not None and (
            isinstance(max_concurrent_steps, bool)
            or not isinstance(max_concurrent_steps, int)
            or max_concurrent_steps < 1
        ):
            raise ConfigurationError(
                f"max_concurrent_steps must be an integer >= 1 or None, got {max_concurrent_steps!r}"
            )
        tuning: dict[str, Any] = {}
        if poll_seconds is not None:
            tuning["poll_seconds"] = poll_seconds
        if watch_seconds is not None:
            tuning["watch_seconds"] = watch_seconds
        spec = KubernetesSpec(
            image=image,
            store_secret=store_secret,
            namespace=namespace,
            store_secret_key=store_secret_key,
            resources=dict(resources or {}),
            service_account=service_account,
            active_deadline_seconds=active_deadline_seconds,
            image_pull_policy=image_pull_policy,
            env=dict(env or {}),
            kubeconfig=kubeconfig,
            context=context,
            **tuning,
        )
        return cls("kubernetes", max_concurrent_steps, pods=spec)

    @property
    def process_slots(self) -> int:
        """Sync steps of one run at once under this executor."""
        if self.kind == "in_process":
            return 1
        return self.max_workers if self.max_workers is not None else loky.cpu_count()

    def __repr__(self) -> str:
        if self.kind == "in_process":
            return "Executor.in_process()"
        if self.kind == "kubernetes" and self.pods is not None:
            return (
                f"Executor.kubernetes(image={self.pods.image!r}, namespace={self.pods.namespace!r},"
                f" max_concurrent_steps={self.max_workers})"
            )
        return f"Executor.parallel(max_workers={self.max_workers}, max_async_concurrent={self.max_async_concurrent})"


IDLE_PROCESS_SECONDS = 300  # a pool process idle this long exits; the pool starts another when needed


class ProcessPool(Protocol):
    """What tidegate uses of a loky pool (loky ships no types)."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]: ...

    def shutdown(self, wait: bool = True, *, kill_workers: bool = False) -> None: ...


_pool_lock = threading.Lock()
_pool: ProcessPool | None = None
_pool_size = 0


def process_pool(workers: int) -> ProcessPool:
    """This process's loky pool, with at least `workers` processes (grown by replacing it).

    Held here, not through `loky.get_reusable_executor`, whose executor is
    per *thread*: every worker thread would start a pool of its own.
    """
    global _pool, _pool_size
    with _pool_lock:
        if _pool is None or workers > _pool_size:
            _pool_size = max(workers, _pool_size)
            _pool = _replace(_pool)
        return _pool


def _replace(old: ProcessPool | None) -> ProcessPool:
    if old is not None:
        old.shutdown(wait=False)  # its running steps finish; new ones go to the new pool
    pool: ProcessPool = loky.ProcessPoolExecutor(max_workers=_pool_size, timeout=IDLE_PROCESS_SECONDS)
    return pool


def shutdown_process_pool() -> None:
    """Stop this process's pool now, killing its processes: a step abandoned by a hand-back
    would otherwise keep the leaving process alive until it returned."""
    global _pool
    with _pool_lock:
        pool, _pool = _pool, None
    if pool is not None:
        pool.shutdown(wait=False, kill_workers=True)


def submit(workers: int, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Future[Any]:
    """Submit to the pool; a pool broken by a process that died (its step failed with
    TerminatedWorkerError) is replaced once, so one crash does not fail every later step."""
    global _pool
    pool = process_pool(workers)
    try:
        return pool.submit(fn, *args, **kwargs)
    except BrokenProcessPool:
        with _pool_lock:
            if _pool is pool:
                _pool = _replace(pool)
            replacement = _pool
        if replacement is None:
            raise  # the pool was shut down meanwhile (its worker is leaving): the step fails
        return replacement.submit(fn, *args, **kwargs)


class Slots:
    """A semaphore whose urgent waiters go first.

    A step that already holds pool slots waits for an executor slot as
    urgent: were it queued behind steps that need no pool, the pool's slots
    would sit idle, claimed, while those run.
    """

    def __init__(self, size: int) -> None:
        self._free = size
        self._urgent: deque[asyncio.Future[None]] = deque()
        self._normal: deque[asyncio.Future[None]] = deque()

    async def acquire(self, urgent: bool) -> None:
        if self._free > 0 and not self._urgent and not self._normal:
            self._free -= 1
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        queue = self._urgent if urgent else self._normal
        queue.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release()  # handed a slot just as it was cancelled: pass it on
            elif waiter in queue:
                queue.remove(waiter)
            raise

    def release(self) -> None:
        for queue in (self._urgent, self._normal):
            while queue:
                waiter = queue.popleft()
                if not waiter.done():
                    waiter.set_result(None)
                    return
        self._free += 1


class RemoteSteps(Protocol):
    """Where an executor that runs steps outside the worker starts them (Kubernetes Jobs)."""

    def start(self, step: StepUpdate, fn: Callable[..., Any]) -> Awaitable[Any]:
        """Start step `step` (its key, map and item) running `fn`; await its output."""

    async def close(self) -> None:
        """The run's attempt is over: remove whatever of it is left (no Job outlives its run)."""


class RunCaps:
    """One run's executor caps: how many of its steps may execute at once, and where they do."""

    def __init__(self, executor: Executor, remote: RemoteSteps | None = None) -> None:
        self.executor = executor
        self.remote = remote
        self._sync: Slots | None
        self._async: Slots | None
        if executor.kind == "in_process":
            self._sync = self._async = Slots(1)  # serial: one step of any kind
        elif executor.kind == "kubernetes":
            # Sync or async, every step is a pod: one cap for both kinds.
            self._sync = self._async = Slots(executor.max_workers) if executor.max_workers is not None else None
        else:
            self._sync = Slots(executor.process_slots)
            cap = executor.max_async_concurrent
            self._async = Slots(cap) if cap is not None else None

    @asynccontextmanager
    async def slot(self, is_async: bool, urgent: bool = False) -> AsyncIterator[None]:
        """Hold one of the run's executor slots for a step of this kind (`urgent`: it holds pool slots)."""
        slots = self._async if is_async else self._sync
        if slots is None:
            yield
            return
        await slots.acquire(urgent)
        try:
            yield
        finally:
            slots.release()

    def start(
        self,
        fn: Callable[..., Any],
        is_async: bool,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        step: StepUpdate | None = None,
    ) -> Awaitable[Any]:
        """Hand the step function to where this executor runs it, now; await the result (its
        exception propagates). Starting before awaiting lets the caller act once it is on its way.
        A remote executor gets `step` (which step this is) instead of the arguments: its pod reads
        them from the store."""
        if self.remote is not None:
            if step is None:
                raise RuntimeError("a remote executor needs the step's key to start it")
            return self.remote.start(step, fn)
        if is_async:
            coroutine: Coroutine[Any, Any, Any] = fn(*args, **kwargs)
            return asyncio.ensure_future(coroutine)
        if self.executor.kind == "in_process":
            return _on_daemon_thread(fn, args, kwargs)
        return asyncio.wrap_future(submit(self.executor.process_slots, fn, args, kwargs))


def _on_daemon_thread(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> asyncio.Future[Any]:
    """Run `fn` on a daemon thread: a step stuck in a C call must not keep a stopping worker alive."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()

    def settle(error: BaseException | None, value: Any) -> None:
        if future.done():
            return  # the step was abandoned (cancel, hand-back): its result goes nowhere
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)

    def target() -> None:
        try:
            value = fn(*args, **kwargs)
        except BaseException as error:  # handed to the awaiting step, never lost on this thread
            _call_soon(loop, settle, error, None)
        else:
            _call_soon(loop, settle, None, value)

    threading.Thread(target=target, name="tidegate-step", daemon=True).start()
    return future


def _call_soon(loop: asyncio.AbstractEventLoop, fn: Callable[..., None], *args: Any) -> None:
    with contextlib.suppress(RuntimeError):  # the worker's loop has closed: nobody waits for this step any more
        loop.call_soon_threadsafe(fn, *args)
