"""Executing claimed runs: start each attempt, watch it, stop it, and settle it exactly once.

Sync tasks run on daemon threads, async tasks and workflows on the worker's
loop. Every method that touches the attempts in flight runs on the loop's
thread (other threads come in through the `LoopBridge`), so the set of
attempts needs no lock. Settling is claimed under the attempt's own lock
(`Attempt.claim_settlement`): a replay-only attempt reports its outcome from
its own thread (`_report_now`), and the loop may settle it meanwhile. A slot
of capacity stays taken until the attempt's code has really returned, even
after its outcome was recorded.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections import deque
from collections.abc import Coroutine, Mapping, Sequence
from typing import Any

from tidegate.domain.children import TriggerCanceled, WaitSuspended
from tidegate.domain.clock import Clock
from tidegate.domain.model import ClaimedRun, CycleRequest, CycleResult, Outcome
from tidegate.domain.snooze import Snooze
from tidegate.engine.runtime import tracing
from tidegate.engine.runtime.pools import PoolGuard
from tidegate.storage.port import Fence, Store
from tidegate.worker import attempt_log, outcomes
from tidegate.worker.bridge import LoopBridge
from tidegate.worker.children import ChildLink
from tidegate.worker.execution import Attempt, AttemptInterrupted, TaskFunction
from tidegate.worker.lapsed import Lapsed, lead_ran_out
from tidegate.worker.metrics import record_attempt
from tidegate.worker.reports import Reports
from tidegate.worker.settings import WorkerSettings
from tidegate.worker.threads import DaemonThreadPool
from tidegate.workflow import RunScope, execute_workflow

log = logging.getLogger("tidegate.worker")


class Dispatcher:
    """The attempts in flight on one worker, from claim to the release of their slot."""

    def __init__(
        self,
        store: Store,
        worker_id: str,
        tasks: Mapping[str, TaskFunction],
        settings: WorkerSettings,
        bridge: LoopBridge,
        reports: Reports,
        pool_guard: PoolGuard,
        clock: Clock,
    ) -> None:
        self._store = store
        self._worker_id = worker_id
        self._tasks = tasks
        self._settings = settings
        self._bridge = bridge
        self._reports = reports
        self._pool_guard = pool_guard  # shared by the steps of every workflow run here
        self._clock = clock  # the worker's: an attempt's duration runs from the monotonic time its claim was sent
        self._busy: dict[Fence, Attempt] = {}
        # Runs claimed ahead of a free slot (`CycleRequest.claim_ahead`), with the time their claim
        # was sent: each starts when a slot frees, so at most max_workers attempts ever run.
        self._waiting: deque[tuple[ClaimedRun, float]] = deque()
        # Runs taken ahead under a rate whose lead ran out before a slot freed: they start only once
        # the store charged them again (`CycleRequest.recharge`)
        self.lapsed = Lapsed()
        self._holding = False  # stopping: a waiting run starts no more (it is handed back)
        self._unbegun: set[Fence] = set()  # async attempts started whose task has not run yet
        self._threads = DaemonThreadPool(settings.max_workers, "tidegate-task")
        self.completed = 0  # attempts whose outcome was reported (for summaries and tests)

    # --- what is in flight ------------------------------------------------------------

    @property
    def in_flight(self) -> int:
        """Runs this worker holds: those running and those claimed ahead, waiting for a slot."""
        return len(self._busy) + len(self._waiting) + len(self.lapsed)

    @property
    def unbegun(self) -> bool:
        """Some async attempt was started and its task has not run yet (the loop lets it run first)."""
        return bool(self._unbegun)

    def unsettled(self) -> bool:
        """Some attempt's outcome is not reported yet (or is being written by its own thread)."""
        return any(not attempt.settled or attempt.reporting for attempt in self._busy.values())

    def unsettled_attempts(self) -> list[Attempt]:
        return [attempt for attempt in self._busy.values() if not attempt.settled]

    def leases(self) -> dict[Fence, float]:
        """Attempts whose leases must be kept renewed (a waiting run's too), each with the monotonic
        time (of the worker's clock) its claim was sent."""
        leases = {fence: attempt.claim_sent for fence, attempt in list(self._busy.items()) if not attempt.settled}
        leases.update((run.fence, sent) for run, sent in [*self._waiting, *self.lapsed])
        return leases

    def hold_waiting(self) -> None:
        """Stopping: the runs claimed ahead start no more (`take_waiting` hands them over)."""
        self._holding = True

    def take_waiting(self) -> list[Fence]:
        """The runs claimed ahead that never started, to hand back; they start no more."""
        self.hold_waiting()
        fences = [run.fence for run, _ in [*self._waiting, *self.lapsed.take()]]
        self._waiting.clear()
        return fences

    # --- starting -----------------------------------------------------------------------

    def dispatch(self, run: ClaimedRun, claim_sent: float) -> None:
        """Start the run, or keep it waiting for a slot when all max_workers are taken."""
        if len(self._busy) >= self._settings.max_workers:
            self._waiting.append((run, claim_sent))
        elif lead_ran_out(run, claim_sent, self._clock.monotonic()):
            self.lapsed.add(run, claim_sent)
        else:
            self._start(run, claim_sent)

    def take_recharges(self) -> tuple[list[Fence], int]:
        """The runs whose lead ran out, in the order they would start, for the next cycle to charge
        again (`CycleRequest.recharge`); and how many of them could start at once (a slot free for
        each: `CycleRequest.recharge_at_once`)."""
        fences = self.lapsed.ask()
        return fences, min(len(fences), max(0, self._settings.max_workers - len(self._busy) - len(self._waiting)))

    def recharged(self, asked: Sequence[Fence], leads: Mapping[str, float | None], sent: float) -> None:
        """The cycle sent at `sent` charged again `leads` of the runs `asked`: each goes first in
        line for a slot, its lead counted from `sent` (None: it starts as any claimed run)."""
        for run in reversed(self.lapsed.answered(asked, leads)):
            self._waiting.appendleft((run, sent))
        self._start_waiting()

    def _start(self, run: ClaimedRun, claim_sent: float) -> None:
        loop = self._bridge.loop
        assert loop is not None
        task = self._tasks.get(run.task)
        attempt = Attempt(run, task, claim_sent)
        attempt.span = tracing.attempt(run, self._worker_id)
        worker = self._worker_id
        attempt.context._children = ChildLink(
            self._store, run.fence, worker, on_resumed=lambda children: attempt_log.resumed(run, worker, children)
        )
        attempt.context._costs = functools.partial(self._store.report_cost, worker, run.fence)
        attempt_log.claimed(run, worker, attempt.span)
        self._busy[attempt.fence] = attempt
        if task is None:
            self._settle(attempt, outcomes.failure(attempt, f"UnknownTask: no task named {run.task!r} on this worker"))
            self._release(attempt)
            return
        if run.timeout is not None:
            attempt.timers.append(loop.call_later(run.timeout, self._on_timeout, attempt))
        if task.is_async:
            self._unbegun.add(attempt.fence)
            attempt.async_task = loop.create_task(self._run_async(attempt, task))
            attempt.async_task.add_done_callback(lambda _: self._unbegun.discard(attempt.fence))  # cancelled unrun
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
                self._note_waits(attempt)
                self._record_start(attempt)
                try:
                    with tracing.use(attempt.span):
                        value = task.fn(**task.call_args(attempt.run.args, attempt.context))
                except WaitSuspended:
                    outcome = None  # the store ended the attempt waiting: nothing to report
                    attempt_log.waiting(attempt.run, self._worker_id)
                except TriggerCanceled as error:
                    outcome = outcomes.for_cancel_before_trigger(attempt, error)
                except Snooze as snooze:
                    outcome = outcomes.for_snooze(attempt, snooze, self._clock.wall())
                except BaseException as error:  # a task's exception never kills the worker
                    outcome = outcomes.for_error(attempt, error)
                else:
                    outcome = outcomes.for_value(attempt, value, self._settings.max_payload)
                attempt.leave_thread()
                if outcome is not None and attempt.replayed_only:
                    self._report_now(attempt, outcome)
                else:
                    self._bridge.call(self._settle, attempt, outcome)
            except AttemptInterrupted:
                attempt.leave_thread()
            self._bridge.call(self._release, attempt)
        except AttemptInterrupted:
            # Landed between leaving the task's code and the release: release still.
            attempt.leave_thread()
            self._bridge.call(self._release, attempt)

    async def _run_async(self, attempt: Attempt, task: TaskFunction) -> None:
        self._unbegun.discard(attempt.fence)
        if attempt.span is not tracing.UNTRACED and attempt.span.is_recording():
            await self._bridge.call_store(self._note_waits, attempt)  # a store read: off the loop
        if attempt.run.suspect:
            await self._bridge.call_store(self._record_start, attempt)  # a store write: off the loop
        else:
            self._record_start(attempt)
        try:
            with tracing.use(attempt.span):
                value = await self._coroutine(attempt, task)
        except WaitSuspended:
            attempt_log.waiting(attempt.run, self._worker_id)
            self._settle(attempt, None)  # the store ended the attempt waiting: nothing to report
            self._release(attempt)
            return
        except TriggerCanceled as error:
            outcome = outcomes.for_cancel_before_trigger(attempt, error)
        except Snooze as snooze:
            outcome = outcomes.for_snooze(attempt, snooze, self._clock.wall())
        except asyncio.CancelledError as error:
            outcome = outcomes.for_error(attempt, error)
        except Exception as error:
            outcome = outcomes.for_error(attempt, error)
        else:
            outcome = outcomes.for_value(attempt, value, self._settings.max_payload)
        if attempt.replayed_only:
            await asyncio.get_running_loop().run_in_executor(None, self._report_now, attempt, outcome)
        else:
            self._settle(attempt, outcome)
        self._release(attempt)

    def _coroutine(self, attempt: Attempt, task: TaskFunction) -> Coroutine[Any, Any, Any]:
        """An async task's call, or a workflow's execution: its steps run under this attempt's fence."""
        if task.workflow is not None:
            scope = RunScope(self._store, attempt.fence, self._worker_id, max_payload=self._settings.max_payload)
            attempt.workflow_stopping = scope.stopping
            return execute_workflow(task.workflow, attempt.run.args, scope, self._pool_guard)
        call: Coroutine[Any, Any, Any] = task.fn(**task.call_args(attempt.run.args, attempt.context))
        return call

    def _note_waits(self, attempt: Attempt) -> None:
        """On a traced attempt's span, the scopes its run waited on since its last claim (read from its
        events, so only when the span records: untraced attempts cost nothing)."""
        if attempt.span is tracing.UNTRACED or not attempt.span.is_recording():
            return
        try:
            tracing.waited_on(attempt.span, self._store.run_events(attempt.run.id), attempt.run.attempt)
        except Exception:
            log.warning("run %s: could not read the scopes it waited on for its span", attempt.run.id, exc_info=True)

    def _record_start(self, attempt: Attempt) -> None:
        """Report the attempt's start; a suspect's is written now, in its own transaction.

        Other starts ride on the next turn (or on a trigger of the attempt, which records the
        start first if no turn did: `storage.shared.waiting.record_start`). Only an attempt whose
        start was recorded is charged for a crash (domain/recovery.py), and a suspect is
        charged for a crash it is the only suspect in: so its start must be in the store
        before its body runs. The write is made off the loop (on the task's thread, or the
        store's thread for async attempts).
        """
        attempt_log.started(attempt.run, self._worker_id, attempt.span)
        if not attempt.run.suspect:
            self._reports.started(attempt.fence)
            return
        settings = self._settings
        try:
            self._store.cycle(
                CycleRequest(self._worker_id, settings.queues, [attempt.fence], [], 0, settings.lease_duration)
            )
        except Exception:
            log.exception(
                "could not record the start of suspect run %s; reporting it with the next turn", attempt.run.id
            )
            self._reports.started(attempt.fence)

    # --- settling (on the loop thread, but for a replay-only attempt's own report) --------

    def _settle(self, attempt: Attempt, outcome: Outcome | None) -> None:
        """Record the attempt's outcome once; None drops it (the store already took it away)."""
        if not attempt.claim_settlement():
            return
        if outcome is not None:
            self._reports.ended(outcome)
        self._settled(attempt, outcome)

    def _report_now(self, attempt: Attempt, outcome: Outcome) -> None:
        """Off the loop: write a replay-only attempt's outcome in a transaction of its own.

        A resumed parent whose triggers were all answered from the store has done its work; left
        to the next turn, its outcome (and the slots it frees) would wait behind the turn in
        flight and then one more. Only such attempts skip the queue: any other outcome is
        batched, which is what makes draining fast. Settled once all the same: if the loop
        settled the attempt first (timeout, cancel, lost lease), nothing is written here.
        """
        if not attempt.claim_settlement(reporting=True):
            return
        settings = self._settings

        def cycle(starts: list[Fence], ended: list[Outcome]) -> CycleResult:
            return self._store.cycle(
                CycleRequest(self._worker_id, settings.queues, starts, ended, 0, settings.lease_duration)
            )

        self._reports.send_now(outcome, cycle)
        self._bridge.call(self._settled, attempt, outcome)

    def _settled(self, attempt: Attempt, outcome: Outcome | None) -> None:
        """On the loop, once the attempt is settled: its timers go; an outcome is counted and logged."""
        attempt.reporting = False
        for timer in attempt.timers:
            timer.cancel()
        if attempt.span is not tracing.UNTRACED:
            tracing.ended(attempt.span, outcome)
        if outcome is not None:
            self.completed += 1
            seconds = self._clock.monotonic() - attempt.claim_sent
            record_attempt(attempt.run, outcome.kind.value, seconds)
            attempt_log.attempt_ended(attempt.run, outcome, seconds, self._worker_id, attempt.span)

    def _release(self, attempt: Attempt) -> None:
        """The attempt's code has returned: its slot of capacity is free."""
        attempt.context._remove_workdir()
        if self._busy.pop(attempt.fence, None) is not None and attempt.span is not tracing.UNTRACED:
            attempt.span.end()
        self._start_waiting()
        self._bridge.wake()

    def _start_waiting(self) -> None:
        """Start the next run waiting for a slot, if a slot is free; one whose lead ran out waits
        for its recharge instead, and the next one is tried."""
        while self._waiting and not self._holding and len(self._busy) < self._settings.max_workers:
            run, sent = self._waiting.popleft()
            if lead_ran_out(run, sent, self._clock.monotonic()):
                self.lapsed.add(run, sent)
                continue
            self._start(run, sent)

    def _on_timeout(self, attempt: Attempt) -> None:
        if attempt.settled or attempt.stop_reason is not None:
            return
        attempt.stop_reason = "timeout"
        attempt.context._cancel("timeout")
        self._settle(attempt, outcomes.for_error(attempt, TimeoutError()))  # the slot is freed when the code returns
        attempt.interrupt()

    # --- stopping -------------------------------------------------------------------------

    def cancel(self, fences: Sequence[Fence]) -> None:
        """The store says these runs were asked to cancel: stop each, after the cancel grace; one
        still waiting for a slot ends canceled without starting."""
        for run, claim_sent in self._take_waiting(fences):
            unstarted = Attempt(run, self._tasks.get(run.task), claim_sent)
            unstarted.stop_reason = "canceled"
            self._settle(unstarted, outcomes.canceled(unstarted))
        for fence in fences:
            attempt = self._busy.get(fence)
            if attempt is not None and not attempt.settled and attempt.stop_reason is None:
                self._stop_attempt(attempt, "canceled", self._settings.cancel_grace)

    def _stop_attempt(self, attempt: Attempt, reason: str, grace: float) -> None:
        """Tell the attempt to stop (cooperatively), and stop it after `grace` seconds.

        A workflow starts no step any more and ends once the steps already running have
        finished (their outputs are checkpoints); those still running at the grace are stopped.
        """
        assert self._bridge.loop is not None
        attempt.stop_reason = reason
        attempt.context._cancel(reason)
        if attempt.workflow_stopping is not None:
            attempt.workflow_stopping.set()
        attempt.timers.append(self._bridge.loop.call_later(grace, self._force_stop, attempt))

    def _force_stop(self, attempt: Attempt) -> None:
        if attempt.settled:
            return
        error = AttemptInterrupted(attempt.stop_reason or "stopped")
        self._settle(attempt, outcomes.for_error(attempt, error))
        attempt.interrupt()

    def lost_leases(self, fences: Sequence[Fence], reason: str = "lease lost") -> None:
        """Threadsafe: these attempts are, or are about to be, someone else's."""
        self._bridge.call(self._drop, list(fences), reason)

    def _take_waiting(self, fences: Sequence[Fence]) -> list[tuple[ClaimedRun, float]]:
        """Remove the runs of `fences` still waiting for a slot; returned with their claim times."""
        wanted = set(fences)
        taken = [entry for entry in self._waiting if entry[0].fence in wanted]
        for entry in taken:
            self._waiting.remove(entry)
        return taken + self.lapsed.take(fences)

    def _drop(self, fences: list[Fence], reason: str) -> None:
        self._take_waiting(fences)  # not started: nothing to stop, the store already took them away
        for fence in fences:
            attempt = self._busy.get(fence)
            if attempt is not None and not attempt.settled:
                log.warning("run %s attempt %s: %s; stopping it", fence[0], fence[1], reason)
                self.give_up([attempt], reason)

    def give_up(self, attempts: Sequence[Attempt], reason: str) -> None:
        """Stop these attempts without an outcome: the store takes them back (hand-back, lost lease)."""
        for attempt in attempts:
            attempt.stop_reason = reason
            attempt.context._cancel(reason)
            self._settle(attempt, None)
            attempt.interrupt()

    def shutdown(self) -> None:
        self._threads.shutdown()
