"""Lease renewal and the sweeper, on their own thread and connection.

Renewal runs off the task threads and the event loop so that a task that
blocks its loop or burns CPU cannot starve its own lease. The sweep is
attempted by every worker but done by one at a time (a leased lock row in
the store), re-queueing runs whose lease expired.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING

from tidegate.storage.port import Store

if TYPE_CHECKING:
    from tidegate.worker.runner import Worker, WorkerSettings

log = logging.getLogger("tidegate.worker")

HEARTBEAT_MARGIN = 0.05  # seconds of slack for the stop itself to take effect


class Maintenance:
    def __init__(self, store: Store, worker: Worker, settings: WorkerSettings) -> None:
        self._store = store
        self._worker = worker
        self._settings = settings
        self._stop = threading.Event()
        self._last_renewal = time.monotonic()
        self._thread = threading.Thread(target=self._loop, name="tidegate-maintenance", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _loop(self) -> None:
        renew_every = self._settings.lease_duration / 3
        sweep_every = self._settings.sweep_interval
        next_renew = time.monotonic() + renew_every
        next_sweep = time.monotonic()  # sweep once at start: recover what a crash left
        while not self._stop.is_set():
            now = time.monotonic()
            if now >= next_renew:
                next_renew = now + renew_every
                self._renew()
            if now >= next_sweep:
                next_sweep = now + sweep_every
                self._sweep()
            self._stop.wait(max(0.0, min(next_renew, next_sweep) - time.monotonic()))

    def _renew(self) -> None:
        """Heartbeat the registry and renew leases; give attempts up before the sweeper would.

        If renewals keep failing for longer than (lease - renewal interval), the
        lease may expire before the next try: the worker stops its attempts
        itself so that no other worker ever runs them at the same time.
        """
        held = self._worker.leased_fences()
        started = time.monotonic()  # the store stamps the lease no earlier than this
        try:
            if not self._store.heartbeat_worker(self._worker.id, self._settings.lease_duration):
                self._worker.register()  # the row was swept while we were away
            lost = self._store.renew_leases(self._worker.id, held, self._settings.lease_duration) if held else []
        except Exception:
            # The next try comes one interval from now; if the lease could run out
            # before it, stop the attempts now, while they are still ours alone.
            interval = self._settings.lease_duration / 3
            silent = time.monotonic() - self._last_renewal
            if silent + interval >= self._settings.lease_duration - HEARTBEAT_MARGIN and held:
                log.error("lease renewals failing for %.1fs: stopping %d attempts (heartbeat lost)", silent, len(held))
                self._worker.lost_leases(held, reason="heartbeat lost")
            else:
                log.exception("lease renewal failed; will retry")
            return
        self._last_renewal = started
        if lost:
            self._worker.lost_leases(lost)

    def _sweep(self) -> None:
        try:
            report = self._store.sweep(self._worker.id, self._settings.sweep_interval)
        except Exception:
            log.exception("sweep failed; will retry")
            return
        if report:
            log.warning("sweeper: re-queued %d and failed %d runs whose lease expired", len(report.requeued), len(report.failed))
