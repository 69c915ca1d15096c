"""Lease renewal and the sweeper, on their own thread and connection; a lease watchdog on another.

Renewal runs off the task threads and the event loop so that a task that
blocks its loop or burns CPU cannot starve its own lease. The sweep is
attempted by every worker but done by one at a time (a leased lock row in
the store), re-queueing runs whose lease expired. The watchdog gives each
attempt up once its lease could have expired in the store (`domain.leases`),
judged on the worker's clock from the requests that set it, so that a
renewal blocked in an outage cannot keep an attempt running past its lease.

It knows the worker only as a `LeaseHolder` (the few calls below), so the
worker's loop depends on maintenance and never the other way round.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Sequence
from typing import Protocol

from tidegate.domain.clock import Clock
from tidegate.domain.leases import heartbeat_interval, usable_until
from tidegate.domain.retention import PRUNE_BATCHES_PER_SWEEP
from tidegate.domain.tunables import default_seconds
from tidegate.engine.operators import retention
from tidegate.engine.runtime import schedules
from tidegate.storage.port import Fence, Store
from tidegate.worker import attempt_log

log = logging.getLogger("tidegate.worker")

WATCH_SHARE = 0.1  # the watchdog looks at least every tenth of the lease, for attempts claimed since


class LeaseHolder(Protocol):
    """What maintenance needs of its worker."""

    id: str

    def leases(self) -> dict[Fence, float]:
        """Attempts to keep renewed, each with the `clock.monotonic()` its claim was sent."""
        ...

    def register(self) -> int:
        """Register again (the registry row was swept while the worker was away)."""
        ...

    def resume_claims(self) -> None:
        """A heartbeat landed after a lapse: claiming may go on."""
        ...

    def lost_leases(self, fences: Sequence[Fence], reason: str = "lease lost") -> None:
        """Threadsafe: stop these attempts, whose leases are or could be someone else's."""
        ...


class Maintenance:
    def __init__(
        self,
        store: Store,
        worker: LeaseHolder,
        *,
        lease_duration: float,
        sweep_interval: float,
        clock: Clock,
        registered_at: float,
        retention: float = default_seconds("TIDEGATE_RETENTION"),
    ) -> None:
        """`registered_at`: the `clock.monotonic()` the worker's registration (its first heartbeat) was sent.
        Every time is a reading of `clock`; the threads' waits run on real time."""
        self._store = store
        self._worker = worker
        self._lease = lease_duration
        self._sweep_every = sweep_interval
        self._retention = retention  # the sweeper deletes finished runs older than this
        self._unapplied: set[str] = set()  # runs the last sweep could not recover, already logged
        self._clock = clock
        self._stop = threading.Event()
        self._nudged = threading.Event()  # renew now: the worker holds its claims back until it is alive
        self._heartbeat_at = registered_at  # send time of the last heartbeat that landed
        self._renewed: dict[Fence, float] = {}  # attempt -> send time of the last renewal of its lease that landed
        self._threads = [
            threading.Thread(target=self._loop, name="tidegate-maintenance", daemon=True),
            threading.Thread(target=self._watch, name="tidegate-lease-watchdog", daemon=True),
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._nudged.set()
        for thread in self._threads:
            thread.join(timeout=10)

    def _loop(self) -> None:
        renew_every = heartbeat_interval(self._lease)
        sweep_every = self._sweep_every
        next_renew = self._clock.monotonic() + renew_every
        next_sweep = self._clock.monotonic()  # sweep once at start: recover what a crash left
        next_fire = next_sweep  # due schedule ticks, about once a second (engine/runtime/schedules.py)
        while not self._stop.is_set():
            now = self._clock.monotonic()
            if now >= next_renew or self._nudged.is_set():
                self._nudged.clear()
                next_renew = now + renew_every
                was_alive = self.heartbeat_alive()
                self._renew()
                if not was_alive and self.heartbeat_alive():
                    self._worker.resume_claims()
            if now >= next_sweep:
                next_sweep = now + sweep_every
                self._sweep()
            if now >= next_fire:
                next_fire = now + min(schedules.FIRE_EVERY, sweep_every)
                self._fire_schedules()
            self._nudged.wait(max(0.0, min(next_renew, next_sweep, next_fire) - self._clock.monotonic()))

    def renew_now(self) -> None:
        """Heartbeat at once rather than at the next turn: after an outage the worker claims
        nothing until its heartbeat is sure again, and a turn can be a third of the lease away."""
        self._nudged.set()

    def _renew(self) -> None:
        """Heartbeat the registry and renew leases; a failure is retried at the next turn, and
        the watchdog stops the attempts before their leases could run out meanwhile."""
        held = list(self._worker.leases())
        started = self._clock.monotonic()  # the store stamps the heartbeat and the leases no earlier than this
        try:
            if not self._store.heartbeat_worker(self._worker.id, self._lease):
                self._worker.register()  # the row was swept while we were away
            self._heartbeat_at = started
            lost = self._store.renew_leases(self._worker.id, held, self._lease) if held else []
        except Exception:
            log.exception("lease renewal failed; will retry")
            return
        self._renewed = dict.fromkeys(set(held).difference(map(tuple, lost)), started)
        if lost:
            self._worker.lost_leases(lost)

    def _watch(self) -> None:
        """Give attempts up before the sweeper could: an attempt's run is rescued once its lease or
        its worker's heartbeat expired, each no earlier than the send of the request that set it
        plus the lease. Never waits for a store call."""
        lease = self._lease
        given_up: set[Fence] = set()
        while not self._stop.is_set():
            now = self._clock.monotonic()
            leases = self._worker.leases()
            renewed, heartbeat_until = self._renewed, self._heartbeat_until()
            until = {
                fence: min(usable_until(max(claimed, renewed.get(fence, claimed)), lease), heartbeat_until)
                for fence, claimed in leases.items()
            }
            given_up &= set(leases)
            lapsed = [fence for fence, deadline in until.items() if deadline <= now and fence not in given_up]
            if lapsed:
                log.error("lease renewals failing or late: stopping %d attempts (heartbeat lost)", len(lapsed))
                self._worker.lost_leases(lapsed, reason="heartbeat lost")
                given_up.update(lapsed)
            wake = min((deadline for deadline in until.values() if deadline > now), default=math.inf)
            self._stop.wait(max(0.0, min(wake, now + lease * WATCH_SHARE) - self._clock.monotonic()))

    def heartbeat_alive(self) -> bool:
        """Whether this worker's registry row is surely not expired (see `_watch`)."""
        return self._clock.monotonic() < self._heartbeat_until()

    def _heartbeat_until(self) -> float:
        return usable_until(self._heartbeat_at, self._lease)

    def _sweep(self) -> None:
        try:
            report = self._store.sweep(self._worker.id, self._sweep_every)
        except Exception:
            log.exception("sweep failed; will retry")
            return
        if report is None:
            return  # another worker holds the sweeper's lease
        self._log_unapplied(report.unapplied)
        if report.requeued or report.failed:
            requeued, failed = len(report.requeued), len(report.failed)
            log.warning("sweeper: re-queued %d and failed %d runs whose lease expired", requeued, failed)
            try:
                attempt_log.swept(self._store, report)
            except Exception:
                log.exception("could not read the swept runs to log them")
        # This worker holds the sweeper's lease: retention is its job too.
        try:
            pruned = retention.prune(self._store, self._retention, max_batches=PRUNE_BATCHES_PER_SWEEP)
        except Exception:
            log.exception("retention failed; will retry")
            return
        if pruned.runs:
            log.info("retention: deleted %d finished runs and %d events", pruned.runs, pruned.events)

    def _log_unapplied(self, unapplied: dict[str, str]) -> None:
        """One error per run the sweep could not recover, when it first could not (not at every pass)."""
        for run_id, error in sorted(unapplied.items()):
            if run_id not in self._unapplied:
                log.error("sweeper: could not recover run %s, left as it is (the others were): %s", run_id, error)
        self._unapplied = set(unapplied)

    def _fire_schedules(self) -> None:
        try:
            schedules.fire_due(self._store)
        except Exception:
            log.exception("firing schedules failed; will retry")
