"""The worker loop: wake -> (report + claim) -> execute, one store round trip per turn.

Each turn sends the store everything that happened since the last one (starts
and outcomes) together with a claim for the free capacity, in a single
transaction. Under load many completions share one turn, which is what makes
draining fast; when idle, the worker sleeps until a wake-up (a new run, a
freed slot, a cancel), a scheduled run falls due, or the backstop poll.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable, Coroutine, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from tidegate.domain.clock import SYSTEM_CLOCK, Clock
from tidegate.domain.errors import ConfigurationError, InvalidArgument
from tidegate.domain.jsonvalue import DEFAULT_MAX_PAYLOAD, ensure_payload
from tidegate.domain.model import ClaimedRun, CycleResult, Outcome, OutcomeKind
from tidegate.domain.retry import retry_delay
from tidegate.engine.pools import ClaimPolicy, PoolGuard
from tidegate.storage.port import Fence, Store
from tidegate.worker.execution import Attempt, AttemptInterrupted, TaskFunction, describe_error
from tidegate.worker.maintenance import Maintenance
from tidegate.worker.metrics import OVERFLOW_SIGNALS
from tidegate.worker.threads import DaemonThreadPool
from tidegate.workflow import RunScope, execute_workflow
from tidegate.workflow.executors import shutdown_process_pool

log = logging.getLogger("tidegate.worker")

STORE_RETRY_FIRST = 0.05  # seconds before retrying a failed store cycle; doubles up to STORE_RETRY_MAX
STORE_RETRY_MAX = 0.5  # not the poll interval: a store that is back is used within this, whatever the poll


@dataclass(frozen=True)
class WorkerSettings:
    queues: tuple[str, ...]
    max_workers: int = 10
    drain: bool = False
    lease_duration: float = 30.0
    poll_interval: float = 1.0
    sweep_interval: float = 10.0
    cancel_grace: float = 5.0
    shutdown_grace: float = 30.0
    claim_policy: ClaimPolicy = ClaimPolicy()  # how workflow steps wait for pool slots
    fill_order: bool = False
    max_idle: float | None = None  # exit after this long with nothing to do
    overflow_interval: float = 30.0
    max_payload: int = DEFAULT_MAX_PAYLOAD  # a larger result fails its attempt instead of being stored

    def __post_init__(self) -> None:
        if not self.queues:
            raise ConfigurationError("a worker needs at least one queue (no task is registered and none was given)")
        if self.max_workers < 1:
            raise ConfigurationError(f"max_workers must be >= 1, got {self.max_workers}")
        if self.lease_duration < 0.3:
            raise ConfigurationError(f"lease duration must be at least 300ms, got {self.lease_duration}s")


class Worker:
    """Claims runs from its queues and executes them, up to `max_workers` at once."""

    def __init__(
        self,
        store: Store,
        tasks: Mapping[str, TaskFunction],
        settings: WorkerSettings,
        on_ready: Callable[[], None] | None = None,
        on_overflow: Sequence[Callable[[int], None]] = (),
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._store = store
        self.clock = clock  # the store reads the same clock (App passes one to both)
        self._on_overflow = list(on_overflow)
        self.rank: int | None = None
        self._tasks = tasks
        self.settings = settings
        self.id = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._on_ready = on_ready
        self._busy: dict[Fence, Attempt] = {}
        self._reports: list[tuple[str, Any]] = []  # ("start", fence) | ("outcome", Outcome); appended from threads
        self._reports_lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self._wake: asyncio.Event | None = None
        self._stopping = False
        self._external_wake = False
        self._idle_since = time.monotonic()
        self._stop_deadline: float | None = None
        self._thread: threading.Thread | None = None
        self._started = threading.Event()
        self._finished = threading.Event()
        self._error: BaseException | None = None
        self._threads = DaemonThreadPool(settings.max_workers, "tidegate-task")
        self._db = ThreadPoolExecutor(1, thread_name_prefix="tidegate-db")
        self._pool_guard = PoolGuard(store, settings.claim_policy)  # shared by the steps of every workflow run here
        self._maintenance: Maintenance | None = None
        self.completed = 0  # attempts this worker reported (for summaries and tests)

    # --- public control ---------------------------------------------------------

    def run(self) -> None:
        """Work until stopped (SIGTERM/SIGINT in the main thread), or until drained with `drain`.

        In the main thread the worker owns its process: on the way out it also stops the
        process's step pool, whose processes may still run steps of handed-back workflows.
        """
        owns_process = threading.current_thread() is threading.main_thread()
        try:
            asyncio.run(self._serve(install_signals=owns_process))
        finally:
            if owns_process:
                shutdown_process_pool()

    def start(self) -> Worker:
        """Run in a background thread (for embedding and tests); returns once it is serving."""
        self._thread = threading.Thread(target=self._run_in_thread, name="tidegate-worker", daemon=True)
        self._thread.start()
        self._started.wait(30)
        return self

    def stop(self, timeout: float | None = None, grace: float | None = None) -> None:
        """Stop claiming; let in-flight runs finish within the grace period, then hand them back."""
        self.request_stop(grace)
        if self._thread is not None:
            self._thread.join(timeout)

    def request_stop(self, grace: float | None = None) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            loop.call_soon_threadsafe(self._begin_stop, self.settings.shutdown_grace if grace is None else grace)
        except RuntimeError:
            pass  # the loop already ended

    def join(self, timeout: float | None = None) -> bool:
        return self._finished.wait(timeout)

    @property
    def in_flight(self) -> int:
        return len(self._busy)

    def _run_in_thread(self) -> None:
        try:
            asyncio.run(self._serve(install_signals=False))
        except BaseException as error:  # surfaced to the embedding code by join/stop
            self._error = error
            log.exception("worker stopped on an error")
            self._started.set()

    # --- the loop ---------------------------------------------------------------

    async def _serve(self, install_signals: bool) -> None:
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._loop_thread = threading.get_ident()
        self._wake = asyncio.Event()
        if install_signals:
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(signum, self._on_signal)
        registered_at = time.monotonic()
        self.rank = await self._call_store(self.register)
        listener = self._store.listen(self._on_notification)
        self._maintenance = maintenance = Maintenance(self._store, self, self.settings, registered_at)
        maintenance.start()
        self._started.set()
        if self._on_ready is not None:
            self._on_ready()
        try:
            await self._turns()
        finally:
            try:
                # First, while the loop still runs every step: stopping the threads below blocks it
                # for a moment, and steps ending meanwhile would go unrecorded, to be run again.
                await self._hand_back_unsettled()
            finally:
                maintenance.stop()
                listener.close()
            try:
                await self._call_store(self._store.deregister_worker, self.id)
            except Exception:
                log.exception("could not deregister; the registry row expires by itself")
            self._threads.shutdown()
            self._pool_guard.close()
            self._db.shutdown(wait=True)
            self._finished.set()

    async def _turns(self) -> None:
        assert self._wake is not None
        poll = self.settings.poll_interval
        backoff = STORE_RETRY_FIRST
        look = True  # read the store this turn even with no free slot: a cancel may wait there
        while True:
            self._wake.clear()
            reports = self._take_reports()
            held_back = self._stopping or self._running_suspect() or not self._alive()
            free = 0 if held_back else self.settings.max_workers - len(self._busy)
            result: CycleResult | None = None
            if reports[0] or reports[1] or free > 0 or look:
                sent = time.monotonic()  # the leases of the runs it claims are stamped no earlier
                try:
                    result = await self._call_store(
                        self._store.cycle,
                        self.id,
                        self.settings.queues,
                        reports[0],
                        reports[1],
                        free,
                        self.settings.lease_duration,
                    )
                except Exception:
                    # The store is unreachable or failed: keep the reports, wait, try again.
                    # Leases run out meanwhile if this lasts, and the sweeper recovers the runs.
                    self._put_back(reports)
                    log.exception("store cycle failed; retrying in %.2fs", backoff)
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, STORE_RETRY_MAX)
                    look = True
                    continue
                backoff = STORE_RETRY_FIRST
                self._apply(result, sent)
                if free == 0 and look and not self._stopping:
                    await self._check_overflow()
                if free > 0 and result.claimed and (len(result.claimed) == free or result.more):
                    continue  # a full batch, or a full read: more may be claimable now
            if self._stopping:
                if not self._unsettled() and not self._has_reports():
                    return
                if self._stop_deadline is not None and time.monotonic() >= self._stop_deadline:
                    return
            elif self._idle_too_long():
                log.info("idle for %.0fs (max idle): exiting", self.settings.max_idle)
                return
            elif self.settings.drain and not self._busy and not self._has_reports():
                try:
                    if await self._call_store(self._store.pending_count, self.settings.queues) == 0:
                        return
                except Exception:
                    log.exception("could not count pending runs; will ask again")
            if self._has_reports():
                look = False
                continue
            timeout = poll
            if result is not None and result.next_due_in is not None:
                timeout = min(timeout, max(0.0, result.next_due_in) + 0.001)
            if self._stopping and self._stop_deadline is not None:
                timeout = min(timeout, max(0.0, self._stop_deadline - time.monotonic()))
            try:
                await asyncio.wait_for(self._wake.wait(), timeout)
                timed_out = False
            except TimeoutError:
                timed_out = True  # the backstop poll
            look = timed_out or self._external_wake
            self._external_wake = False

    def register(self) -> int:
        """Join the worker registry (rank for the fill order, liveness for orphan recovery)."""
        return self._store.register_worker(
            self.id, self.settings.max_workers, self.settings.queues, self.settings.fill_order, self.settings.lease_duration
        )

    def _alive(self) -> bool:
        """False while this worker's heartbeat could have lapsed in the store (renewals failing or
        hanging): a run claimed now could be rescued from it at once, so it claims none, and asks
        for a heartbeat at once (`resume_claims` wakes it when one lands)."""
        if self._maintenance is None or self._maintenance.heartbeat_alive():
            return True
        self._maintenance.renew_now()
        return False

    def resume_claims(self) -> None:
        """From the maintenance thread: a heartbeat landed after a lapse, so claims may go on."""
        self._external_wake = True
        self._wake_threadsafe()

    def _idle_too_long(self) -> bool:
        if self._busy or self._has_reports():
            self._idle_since = time.monotonic()
            return False
        max_idle = self.settings.max_idle
        return max_idle is not None and time.monotonic() - self._idle_since >= max_idle

    async def _check_overflow(self) -> None:
        """Full, and woken or polled: if eligible runs wait for a worker, tell the autoscaler."""
        try:
            backlog = await self._call_store(
                self._store.check_overflow, self.id, self.settings.queues, self.settings.overflow_interval
            )
        except Exception:
            log.exception("overflow check failed")
            return
        if backlog is None:
            return
        OVERFLOW_SIGNALS.inc()
        log.warning("capacity overflow: %d eligible runs wait while every worker is full", backlog)
        for callback in self._on_overflow:
            try:
                callback(backlog)
            except Exception:  # an autoscaler's failure never breaks dispatch
                log.exception("on_overflow callback failed")

    async def _call_store(self, fn: Callable[..., Any], *args: Any) -> Any:
        assert self._loop is not None
        return await self._loop.run_in_executor(self._db, fn, *args)

    def _apply(self, result: CycleResult, sent: float) -> None:
        for fence in result.fenced_out:
            log.warning("run %s attempt %s was taken over; its outcome was discarded", *fence)
        for fence in result.cancel_requested:
            attempt = self._busy.get(fence)
            if attempt is not None and not attempt.settled and attempt.stop_reason is None:
                self._stop_attempt(attempt, "canceled", self.settings.cancel_grace)
        for run in result.claimed:
            self._dispatch(run, sent)

    # --- executing ----------------------------------------------------------------

    def _dispatch(self, run: ClaimedRun, claim_sent: float) -> None:
        assert self._loop is not None
        task = self._tasks.get(run.task)
        attempt = Attempt(run, task, claim_sent)
        self._busy[attempt.fence] = attempt
        if task is None:
            self._settle(attempt, self._failure(attempt, f"UnknownTask: no task named {run.task!r} on this worker"))
            self._release(attempt)
            return
        if run.timeout is not None:
            attempt.timers.append(self._loop.call_later(run.timeout, self._on_timeout, attempt))
        if task.is_async:
            attempt.async_task = self._loop.create_task(self._run_async(attempt, task))
        else:
            self._threads.submit(self._run_sync, attempt, task)

    def _run_sync(self, attempt: Attempt, task: TaskFunction) -> None:
        """On a task thread: execute, hand the outcome to the loop, then free the slot.

        An interrupt (AttemptInterrupted) only ever arrives after the loop has
        settled the attempt, so when it lands outside the task's code there is
        nothing left to report.
        """
        try:
            try:
                attempt.enter_thread()
                self._record_start(attempt)
                try:
                    value = task.fn(**task.call_args(attempt.run.args, attempt.context))
                except BaseException as error:  # a task's exception never kills the worker
                    outcome = self._outcome_for_error(attempt, error)
                else:
                    outcome = self._outcome_for_value(attempt, value)
                attempt.leave_thread()
                self._threadsafe(self._settle, attempt, outcome)
            except AttemptInterrupted:
                attempt.leave_thread()
            self._threadsafe(self._release, attempt)
        except AttemptInterrupted:
            # Landed between leaving the task's code and the release: release still.
            attempt.leave_thread()
            self._threadsafe(self._release, attempt)

    async def _run_async(self, attempt: Attempt, task: TaskFunction) -> None:
        if attempt.run.suspect:
            await self._call_store(self._record_start, attempt)  # a store write: off the loop
        else:
            self._record_start(attempt)
        try:
            value = await self._coroutine(attempt, task)
        except asyncio.CancelledError as error:
            outcome = self._outcome_for_error(attempt, error)
        except Exception as error:
            outcome = self._outcome_for_error(attempt, error)
        else:
            outcome = self._outcome_for_value(attempt, value)
        self._settle(attempt, outcome)
        self._release(attempt)

    def _coroutine(self, attempt: Attempt, task: TaskFunction) -> Coroutine[Any, Any, Any]:
        """An async task's call, or a workflow's execution: its steps run under this attempt's fence."""
        if task.workflow is not None:
            scope = RunScope(self._store, attempt.fence, self.id, max_payload=self.settings.max_payload)
            attempt.workflow_stopping = scope.stopping
            return execute_workflow(task.workflow, attempt.run.args, scope, self._pool_guard)
        return task.fn(**task.call_args(attempt.run.args, attempt.context))

    def _outcome_for_value(self, attempt: Attempt, value: Any) -> Outcome:
        if attempt.context.cancelled and attempt.stop_reason == "canceled":
            return Outcome(attempt.run.id, attempt.run.attempt, OutcomeKind.CANCELED, error="canceled")
        try:
            ensure_payload(value, "result", self.settings.max_payload)
        except InvalidArgument as error:  # the task's value, not our code, is at fault: no traceback
            return self._failure(attempt, f"InvalidResult: {error}")
        return Outcome(attempt.run.id, attempt.run.attempt, OutcomeKind.COMPLETED, result=value)

    def _outcome_for_error(self, attempt: Attempt, error: BaseException) -> Outcome:
        reason = attempt.stop_reason
        if reason == "canceled":
            return Outcome(attempt.run.id, attempt.run.attempt, OutcomeKind.CANCELED, error="canceled")
        if reason == "timeout":
            return self._failure(attempt, f"Timeout: the attempt ran longer than {attempt.run.timeout}s")
        return self._failure(attempt, describe_error(error))

    def _failure(self, attempt: Attempt, error: str) -> Outcome:
        run = attempt.run
        delay = retry_delay(run.attempt, run.max_attempts, run.retry_backoff, random.random())
        return Outcome(run.id, run.attempt, OutcomeKind.FAILED, error=error, retry_delay=delay)

    def _record_start(self, attempt: Attempt) -> None:
        """Report the attempt's start; a suspect's is written now, in its own transaction.

        Other starts ride on the next turn. A suspect runs alone so that a crash
        during it is charged to it, and only an attempt whose start was recorded
        is charged: so its start must be in the store before its body runs. The
        write is made off the loop (on the task's thread, or the store's thread
        for async attempts).
        """
        if not attempt.run.suspect:
            self._report(("start", attempt.fence))
            return
        try:
            self._store.cycle(self.id, self.settings.queues, [attempt.fence], [], 0, self.settings.lease_duration)
        except Exception:
            log.exception("could not record the start of suspect run %s; reporting it with the next turn", attempt.run.id)
            self._report(("start", attempt.fence))

    def _running_suspect(self) -> bool:
        """A suspect runs alone: while one is in flight this worker claims nothing."""
        return any(attempt.run.suspect for attempt in self._busy.values())

    # --- settling (always on the loop thread) ---------------------------------------

    def _settle(self, attempt: Attempt, outcome: Outcome | None) -> None:
        """Record the attempt's outcome once; None drops it (the store already took it away)."""
        if attempt.settled:
            return
        attempt.settled = True
        for timer in attempt.timers:
            timer.cancel()
        if outcome is not None:
            self.completed += 1
            self._report(("outcome", outcome))

    def _release(self, attempt: Attempt) -> None:
        """The attempt's code has returned: its slot of capacity is free."""
        attempt.context._remove_workdir()
        self._busy.pop(attempt.fence, None)
        self._wake_now()

    def _on_timeout(self, attempt: Attempt) -> None:
        if attempt.settled or attempt.stop_reason is not None:
            return
        attempt.stop_reason = "timeout"
        attempt.context._cancel("timeout")
        outcome = self._outcome_for_error(attempt, TimeoutError())
        self._settle(attempt, outcome)  # recorded now; the slot is freed when the code returns
        attempt.interrupt()

    def _stop_attempt(self, attempt: Attempt, reason: str, grace: float) -> None:
        """Tell the attempt to stop (cooperatively), and stop it after `grace` seconds.

        A workflow starts no step any more and ends once the steps already running have
        finished (their outputs are checkpoints); those still running at the grace are stopped.
        """
        assert self._loop is not None
        attempt.stop_reason = reason
        attempt.context._cancel(reason)
        if attempt.workflow_stopping is not None:
            attempt.workflow_stopping.set()
        attempt.timers.append(self._loop.call_later(grace, self._force_stop, attempt))

    def _force_stop(self, attempt: Attempt) -> None:
        if attempt.settled:
            return
        self._settle(attempt, self._outcome_for_error(attempt, AttemptInterrupted(attempt.stop_reason or "stopped")))
        attempt.interrupt()

    def lost_leases(self, fences: Sequence[Fence], reason: str = "lease lost") -> None:
        """Called (threadsafe) by maintenance: these attempts are, or are about to be, someone else's."""
        self._threadsafe(self._drop_lost, list(fences), reason)

    def _drop_lost(self, fences: list[Fence], reason: str) -> None:
        for fence in fences:
            attempt = self._busy.get(fence)
            if attempt is not None and not attempt.settled:
                log.warning("run %s attempt %s: %s; stopping it", fence[0], fence[1], reason)
                attempt.stop_reason = reason
                attempt.context._cancel(reason)
                self._settle(attempt, None)
                attempt.interrupt()

    def leases(self) -> dict[Fence, float]:
        """Attempts whose leases this worker must keep renewing, each with the monotonic time its
        claim was sent (read from maintenance)."""
        return {fence: attempt.claim_sent for fence, attempt in list(self._busy.items()) if not attempt.settled}

    # --- stopping ---------------------------------------------------------------------

    def _on_signal(self) -> None:
        if self._stopping:
            log.warning("second signal: handing back in-flight runs now")
            self._begin_stop(0.0)
        else:
            log.info("stopping: finishing %d in-flight runs (grace %.0fs)", len(self._busy), self.settings.shutdown_grace)
            self._begin_stop(self.settings.shutdown_grace)

    def _begin_stop(self, grace: float) -> None:
        deadline = time.monotonic() + grace
        if self._stop_deadline is None or deadline < self._stop_deadline:
            self._stop_deadline = deadline
        self._stopping = True
        self._wake_now()

    async def _hand_back_unsettled(self) -> None:
        unsettled = [attempt for attempt in self._busy.values() if not attempt.settled]
        reports = self._take_reports()
        if reports[0] or reports[1]:
            try:
                await self._call_store(
                    self._store.cycle, self.id, self.settings.queues, reports[0], reports[1], 0, self.settings.lease_duration
                )
            except Exception:
                log.exception("could not record the last outcomes; their leases will expire and be recovered")
        if not unsettled:
            return
        for attempt in unsettled:
            attempt.stop_reason = "worker shutting down"
            attempt.context._cancel("worker shutting down")
            self._settle(attempt, None)
            attempt.interrupt()
        try:
            await self._call_store(self._store.hand_back, self.id, [attempt.fence for attempt in unsettled])
        except Exception:
            log.exception("could not hand back in-flight runs; their leases will expire and be recovered")

    # --- plumbing ---------------------------------------------------------------------

    def _unsettled(self) -> bool:
        return any(not attempt.settled for attempt in self._busy.values())

    def _report(self, item: tuple[str, Any]) -> None:
        with self._reports_lock:
            self._reports.append(item)
        if item[0] == "outcome":
            self._wake_threadsafe()

    def _put_back(self, reports: tuple[list[Fence], list[Outcome]]) -> None:
        with self._reports_lock:
            self._reports[:0] = [("start", fence) for fence in reports[0]] + [("outcome", o) for o in reports[1]]

    def _has_reports(self) -> bool:
        return bool(self._reports)

    def _take_reports(self) -> tuple[list[Fence], list[Outcome]]:
        with self._reports_lock:
            reports, self._reports = self._reports, []
        starts = [item for kind, item in reports if kind == "start"]
        outcomes = [item for kind, item in reports if kind == "outcome"]
        return starts, outcomes

    def _on_notification(self) -> None:
        """From the store's listener thread: something changed that this worker may act on."""
        self._external_wake = True
        self._wake_threadsafe()

    def _wake_now(self) -> None:
        if self._wake is not None:
            self._wake.set()

    def _wake_threadsafe(self) -> None:
        self._threadsafe(self._wake_now)

    def _threadsafe(self, fn: Callable[..., Any], *args: Any) -> None:
        loop = self._loop
        if loop is None:
            return
        try:
            if threading.get_ident() == self._loop_thread:
                fn(*args)
            else:
                loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:
            pass  # the loop has closed: the worker is gone
