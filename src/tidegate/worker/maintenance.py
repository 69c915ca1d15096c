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


class Maintenance:
    def __init__(self, store: Store, worker: Worker, settings: WorkerSettings) -> None:
        self._store = store
        self._worker = worker
        self._settings = settings
        self._stop = threading.Event()
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
        held = self._worker.leased_fences()
        if not held:
            return
        try:
            lost = self._store.renew_leases(self._worker.id, held, self._settings.lease_duration)
        except Exception:
            log.exception("lease renewal failed; will retry")
            return
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
