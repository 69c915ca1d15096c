"""The worker loop: wake -> (report + claim) -> execute, one store round trip per turn.

Each turn sends the store everything that happened since the last one (starts
and outcomes) together with a claim for the free capacity, in a single
transaction. Under load many completions share one turn, which is what makes
draining fast; when idle, the worker sleeps until a wake-up (a new run, a
freed slot, a cancel), a scheduled run falls due, or the backstop poll.

Every time the worker reads (idle since, stop deadline, claim sent) comes
from its injected clock; the waits themselves run on real time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from functools import partial

from tidegate.domain.clock import SYSTEM_CLOCK, Clock
from tidegate.domain.model import CycleRequest, CycleResult, Outcome, WorkerRegistration
from tidegate.engine.runtime.pools import PoolGuard
from tidegate.storage.port import Fence, Store
from tidegate.worker.bridge import LoopBridge
from tidegate.worker.dispatch import Dispatcher
from tidegate.worker.execution import TaskFunction
from tidegate.worker.latch import ClaimLatch
from tidegate.worker.maintenance import Maintenance
from tidegate.worker.metrics import OVERFLOW_SIGNALS, record_claims
from tidegate.worker.reports import Reports
from tidegate.worker.settings import WorkerSettings
from tidegate.worker.startup import reach
from tidegate.workflow.executors import shutdown_process_pool

log = logging.getLogger("tidegate.worker")

_serving_lock = threading.Lock()
_serving_count = 0  # workers serving in this process; they share its step process pool


def _serving(change: int) -> int:
    """Count workers in and out of this process; the last one out stops the shared loky pool,
    whose idle processes would otherwise outlive it by minutes."""
    global _serving_count
    with _serving_lock:
        _serving_count += change
        return _serving_count


STORE_RETRY_FIRST = 0.05  # seconds before retrying a failed store cycle; doubles up to STORE_RETRY_MAX
STORE_RETRY_MAX = 0.5  # not the poll interval: a store that is back is used within this, whatever the poll
# The most runs a turn claims ahead, per slot (`Worker._room`). 1 made a drain of no-op runs one
# cycle per 2 x max_workers runs; 4 makes it one per 5 x max_workers (issue 29, docs/architecture.md).
AHEAD_PER_SLOT = 4


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
        self.settings = settings
        self.id = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._on_ready = on_ready
        self._bridge = LoopBridge()
        self._reports = Reports(on_outcome=self._bridge.wake_threadsafe)
        self._pool_guard = PoolGuard(store, settings.claim_policy, clock=clock)
        self._dispatcher = Dispatcher(
            store, self.id, tasks, settings, self._bridge, self._reports, self._pool_guard, clock
        )
        self._stopping = False
        self._external_wake = False
        self._idle_since = clock.monotonic()
        self._stop_deadline: float | None = None
        self._thread: threading.Thread | None = None
        self._started = threading.Event()
        self._finished = threading.Event()
        self._maintenance: Maintenance | None = None
        self._overflow_quiet_until = 0.0  # this worker raised the overflow signal: none can before this
        self._latch = ClaimLatch(clock.monotonic)
        self._found_nothing = False  # the last turn claimed for free slots and got none (drain="due")

    # --- public control ---------------------------------------------------------

    def run(self) -> None:
        """Work until stopped (SIGTERM/SIGINT in the main thread), or until drained with `drain`.

        In the main thread the worker owns its process: on the way out it also stops the
        process's step pool, whose processes may still run steps of handed-back workflows.
        """
        owns_process = threading.current_thread() is threading.main_thread()
        _serving(+1)
        try:
            asyncio.run(self._serve(install_signals=owns_process))
        finally:
            if _serving(-1) == 0 or owns_process:
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
        loop = self._bridge.loop
        if loop is None or loop.is_closed():
            return
        with contextlib.suppress(RuntimeError):  # the loop already ended
            loop.call_soon_threadsafe(self._begin_stop, self.settings.shutdown_grace if grace is None else grace)

    def join(self, timeout: float | None = None) -> bool:
        return self._finished.wait(timeout)

    @property
    def in_flight(self) -> int:
        return self._dispatcher.in_flight

    @property
    def completed(self) -> int:
        """Attempts this worker reported an outcome for (for summaries and tests)."""
        return self._dispatcher.completed

    def _run_in_thread(self) -> None:
        _serving(+1)
        try:
            asyncio.run(self._serve(install_signals=False))
        except BaseException:  # logged; the worker has ended, so `join` returns at once
            log.exception("worker stopped on an error")
            self._finished.set()
            self._started.set()
        finally:
            if _serving(-1) == 0:
                shutdown_process_pool()  # the last worker of the process: its step processes go with it

    # --- the loop ---------------------------------------------------------------

    async def _serve(self, install_signals: bool) -> None:
        woken = self._bridge.bind()
        if install_signals:
            for signum in (signal.SIGTERM, signal.SIGINT):
                asyncio.get_running_loop().add_signal_handler(signum, self._on_signal)
        registered_at = self.clock.monotonic()
        register = partial(
            reach, self.register, self.settings.startup_wait, clock=self.clock, given_up=self._asked_to_stop
        )
        self.rank = await self._bridge.call_store(register)
        listener = self._store.listen(self._on_notification, own=self.id)  # not woken by its own cycles
        self._maintenance = maintenance = Maintenance(
            self._store,
            self,
            lease_duration=self.settings.lease_duration,
            sweep_interval=self.settings.sweep_interval,
            clock=self.clock,
            registered_at=registered_at,
            retention=self.settings.retention,
        )
        maintenance.start()
        self._started.set()
        if self._on_ready is not None:
            self._on_ready()
        try:
            await self._turns(woken)
        finally:
            try:
                # First, while the loop still runs every step: stopping the threads below blocks it
                # for a moment, and steps ending meanwhile would go unrecorded, to be run again.
                await self._hand_back_unsettled()
            finally:
                maintenance.stop()
                listener.close()
            try:
                await self._bridge.call_store(self._store.deregister_worker, self.id)
            except Exception:
                log.exception("could not deregister; the registry row expires by itself")
            self._dispatcher.shutdown()
            self._pool_guard.close()
            self._bridge.close()
            self._finished.set()

    async def _turns(self, woken: asyncio.Event) -> None:
        backoff = STORE_RETRY_FIRST
        look = True  # read the store this turn even with no free slot: a cancel may wait there
        while True:
            if look or self._external_wake:
                # Something may have changed since the last claim. A wake-up of the worker's own (an
                # attempt ended, a slot freed) is not such news: its outcome is reported, and a turn
                # reporting outcomes claims anyway; one whose outcome a turn already took is spurious.
                self._latch.unsettle()
            woken.clear()  # before the turn: a commit its reads miss wakes the loop again after it
            turn = await self._turn(look, backoff)
            if turn is None:
                # The store is unreachable or failed: the reports were kept; wait, try again.
                # Leases run out meanwhile if this lasts, and the sweeper recovers the runs.
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, STORE_RETRY_MAX)
                look = True
                continue
            backoff = STORE_RETRY_FIRST
            result, again = turn
            if again:
                # A full batch, or a full read: more may be claimable now. Let the attempts just
                # started run first (an async run that does not wait ends here), and those claimed
                # ahead that their ends started: the next turn then reports them with its claim,
                # rather than reading the store with none, and claims for every slot they freed.
                while True:  # one yield at least; then until every async attempt started has run
                    await asyncio.sleep(0)
                    if not self._dispatcher.unbegun:
                        break
                continue
            if await self._done():
                return
            if self._reports or self._dispatcher.lapsed.unasked:
                look = False
                continue
            look = await self._wait(woken, result)

    async def _turn(self, look: bool, backoff: float) -> tuple[CycleResult | None, bool] | None:
        """Report and claim in one store cycle, if there is anything to say or room to claim.

        Returns the cycle's result (None if none was needed) and whether to turn again at
        once; None when the cycle failed (logged, its reports put back for the next one).
        """
        self._found_nothing = False
        starts, outcomes = self._reports.take()
        held_back = self._stopping or not self._alive()
        free, ahead = (0, 0) if held_back else self._room(len(outcomes))
        claim = self._latch.claim_limit(free + ahead, outcomes, look)
        ahead = min(ahead, claim)
        recharge, at_once = self._dispatcher.take_recharges()
        if not (starts or outcomes or claim > 0 or look or recharge):
            return None, False
        sent = self.clock.monotonic()  # the leases of the runs it claims are stamped no earlier
        try:
            result: CycleResult = await self._bridge.call_store(
                self._cycle, starts, outcomes, claim, ahead, (recharge, at_once)
            )
        except Exception:
            self._dispatcher.lapsed.failed(recharge)
            self._reports.put_back(starts, outcomes)
            log.exception("store cycle failed; retrying in %.2fs", backoff)
            return None
        self._reports.sent()  # an outcome sent at once may have waited for its start in this turn
        if recharge:  # first in line, before the runs this cycle claimed
            self._dispatcher.recharged(recharge, result.recharged, sent)
        self._apply(result, sent)
        self._latch.claimed(claim, result, sent)
        if len(result.recharged) < len(recharge):
            self._latch.recharge_refused(result.next_allowed_in, sent)
        self._found_nothing = claim > 0 and not result.claimed
        if free == 0 and look and not self._stopping:
            await self._check_overflow()
        again = claim > 0 and bool(result.claimed) and (len(result.claimed) >= claim - ahead or result.more)
        return result, again

    def _room(self, ended: int) -> tuple[int, int]:
        """How many runs a claim may take now: for the free slots, and ahead of them (`CycleRequest.
        claim_ahead`; they wait on this worker for a slot; under a limit only as many as leave it
        half its room, and under a rate only with a lead: `domain.admission`, `Dispatcher.recharged`).

        Ahead: only beside a claim for free slots (none is waiting then), and at most as many runs
        as `ended` since the last turn (a cycle's worth of what this worker ran), up to
        AHEAD_PER_SLOT x max_workers. Runs that end fast are claimed a cycle ahead, and run while
        the next cycle is in flight: while they keep ending within a cycle, each turn's claim grows
        by max_workers up to the cap, so a drain of short runs takes few cycles. A worker whose
        slots are all taken claims none ahead, and one whose runs are long (few end per turn) few,
        so a run claimed ahead seldom waits behind a long one while another worker is idle.
        """
        capacity = self.settings.max_workers
        free = max(0, capacity - self._dispatcher.in_flight)
        return free, min(ended, AHEAD_PER_SLOT * capacity) if free else 0

    def _cycle(
        self, starts: list[Fence], outcomes: list[Outcome], free: int, ahead: int, recharge: tuple[list[Fence], int]
    ) -> CycleResult:
        """On the store's thread: one cycle; with nothing to report, first `peek_cycle`, one read
        that answers alone when no run can be admitted (no claim turn, no window locks). No
        wake-up is lost: `_turns` clears its flag before the turn, and a commit the read missed
        notifies after it."""
        settings = self.settings
        if free > 0 and not (starts or outcomes or recharge[0]):
            peeked = self._store.peek_cycle(self.id, settings.queues)
            if peeked is not None:
                return peeked
        return self._store.cycle(
            CycleRequest(
                self.id,
                settings.queues,
                starts,
                outcomes,
                free,
                settings.lease_duration,
                ahead,
                recharge[0],
                recharge[1],
            )
        )

    async def _done(self) -> bool:
        """Whether to leave the loop: stopped and settled (or out of grace), idle too long, or drained."""
        if self._stopping:
            if not self._dispatcher.unsettled() and not self._reports:
                return True
            return self._stop_deadline is not None and self.clock.monotonic() >= self._stop_deadline
        if self._idle_too_long():
            log.info("idle for %.0fs (max idle): exiting", self.settings.max_idle)
            return True
        if self._dispatcher.in_flight or self._reports:
            return False
        if self.settings.drain == "due":  # a claim found nothing due, with nothing left to report
            return self._found_nothing
        if self.settings.drain:
            try:
                pending: int = await self._bridge.call_store(self._store.pending_count, self.settings.queues)
            except Exception:
                log.exception("could not count pending runs; will ask again")
                return False
            return pending == 0
        return False

    async def _wait(self, woken: asyncio.Event, result: CycleResult | None) -> bool:
        """Sleep until woken, a run falls due, the stop deadline or the backstop poll; returns
        whether the next turn must read the store (polled, or woken from outside)."""
        timeout = self.settings.poll_interval
        if result is not None and result.next_due_in is not None:
            timeout = min(timeout, max(0.0, result.next_due_in) + 0.001)
        timeout = min(timeout, self._latch.wait(timeout) + 0.001)
        if self._stopping and self._stop_deadline is not None:
            timeout = min(timeout, max(0.0, self._stop_deadline - self.clock.monotonic()))
        try:
            await asyncio.wait_for(woken.wait(), timeout)
            timed_out = False
        except TimeoutError:
            timed_out = True  # the backstop poll
        look = timed_out or self._external_wake
        self._external_wake = False
        return look

    def _apply(self, result: CycleResult, sent: float) -> None:
        for fence in result.fenced_out:
            log.warning("run %s attempt %s was taken over; its outcome was discarded", *fence)
        self._dispatcher.cancel(result.cancel_requested)
        record_claims(result.claimed)
        for run in result.claimed:
            self._dispatcher.dispatch(run, sent)

    def _idle_too_long(self) -> bool:
        if self._dispatcher.in_flight or self._reports:
            self._idle_since = self.clock.monotonic()
            return False
        max_idle = self.settings.max_idle
        return max_idle is not None and self.clock.monotonic() - self._idle_since >= max_idle

    async def _check_overflow(self) -> None:
        """Full, and woken or polled: if eligible runs wait for a worker, tell the autoscaler.

        The store raises the signal at most once per interval across workers (a turn that
        expires an interval after it was taken); once this worker raised it, every check
        before an interval has passed since it asked is sure to find that turn still held,
        so it is not made. A draining worker is woken by the other workers' completions
        (each one notifies): asked each time, the check was most of its round trips.
        """
        interval = self.settings.overflow_interval
        asked = self.clock.monotonic()
        if asked < self._overflow_quiet_until:
            return
        try:
            backlog = await self._bridge.call_store(self._store.check_overflow, self.id, self.settings.queues, interval)
        except Exception:
            log.exception("overflow check failed")
            return
        if backlog is None:
            return
        self._overflow_quiet_until = asked + interval
        OVERFLOW_SIGNALS.inc()
        log.warning("capacity overflow: %d eligible runs wait while every worker is full", backlog)
        for callback in self._on_overflow:
            try:
                callback(backlog)
            except Exception:  # an autoscaler's failure never breaks dispatch
                log.exception("on_overflow callback failed")

    # --- what maintenance asks of the worker (`maintenance.LeaseHolder`) ---------------

    def register(self) -> int:
        """Join the worker registry (rank for the fill order, liveness for orphan recovery)."""
        settings = self.settings
        return self._store.register_worker(
            WorkerRegistration(
                self.id, settings.max_workers, settings.queues, settings.fill_order, settings.lease_duration
            )
        )

    def leases(self) -> dict[Fence, float]:
        return self._dispatcher.leases()

    def lost_leases(self, fences: Sequence[Fence], reason: str = "lease lost") -> None:
        self._dispatcher.lost_leases(fences, reason)

    def resume_claims(self) -> None:
        """From the maintenance thread: a heartbeat landed after a lapse, so claims may go on."""
        self._external_wake = True
        self._bridge.wake_threadsafe()

    def _alive(self) -> bool:
        """False while this worker's heartbeat could have lapsed in the store (renewals failing or
        hanging): a run claimed now could be rescued from it at once, so it claims none, and asks
        for a heartbeat at once (`resume_claims` wakes it when one lands)."""
        if self._maintenance is None or self._maintenance.heartbeat_alive():
            return True
        self._maintenance.renew_now()
        return False

    # --- stopping ---------------------------------------------------------------------

    def _asked_to_stop(self) -> bool:
        return self._stopping

    def _on_signal(self) -> None:
        if self._stopping:
            log.warning("second signal: handing back in-flight runs now")
            self._begin_stop(0.0)
        else:
            grace = self.settings.shutdown_grace
            log.info("stopping: finishing %d in-flight runs (grace %.0fs)", self._dispatcher.in_flight, grace)
            self._begin_stop(self.settings.shutdown_grace)

    def _begin_stop(self, grace: float) -> None:
        deadline = self.clock.monotonic() + grace
        if self._stop_deadline is None or deadline < self._stop_deadline:
            self._stop_deadline = deadline
        self._stopping = True
        self._dispatcher.hold_waiting()  # handed back with the unsettled runs (_hand_back_unsettled)
        self._bridge.wake()

    async def _hand_back_unsettled(self) -> None:
        waiting = self._dispatcher.take_waiting()  # claimed ahead, never started
        unsettled = self._dispatcher.unsettled_attempts()
        starts, outcomes = self._reports.take()
        if starts or outcomes:
            settings = self.settings
            try:
                await self._bridge.call_store(
                    self._store.cycle, self.id, settings.queues, starts, outcomes, 0, settings.lease_duration
                )
            except Exception:
                log.exception("could not record the last outcomes; their leases will expire and be recovered")
        if not (unsettled or waiting):
            return
        self._dispatcher.give_up(unsettled, "worker shutting down")
        try:
            fences = [attempt.fence for attempt in unsettled] + waiting
            await self._bridge.call_store(self._store.hand_back, self.id, fences)
        except Exception:
            log.exception("could not hand back in-flight runs; their leases will expire and be recovered")

    def _on_notification(self) -> None:
        """From the store's listener thread: something changed that this worker may act on."""
        self._external_wake = True
        self._bridge.wake_threadsafe()
