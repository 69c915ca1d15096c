"""Runs as operators list them: newest first, filtered by age and stuckness, stuck ones flagged.

`tidegate runs list` and `GET /api/v1/runs` both read through here, so the
filters, the one "stuck" rule (`domain.leases.stuck`) and the one "heartbeat
lost" rule (`domain.leases.heartbeat_lost`) are applied once. The
store pages by id (`Store.page_runs`); ids follow submit time, so an age
filter stops at the first run submitted before its cutoff, and a stuck filter
reads only running runs.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from datetime import datetime

from tidegate.domain.leases import heartbeat_lost, stuck
from tidegate.domain.model import RunRecord, RunStatus, WorkerRecord
from tidegate.storage.port import Store

PAGE = 200  # runs read per page while filtering by age or stuckness


def is_stuck(run: RunRecord, now: datetime) -> bool:
    """Running past its lease: its worker stopped renewing it, and it holds its slots until a sweep."""
    return stuck(run.status is RunStatus.RUNNING, run.lease_expires_at, now)


def matching_runs(
    store: Store,
    now: datetime,
    *,
    status: RunStatus | None = None,
    queue: str | None = None,
    task: str | None = None,
    tags: Mapping[str, str] | None = None,
    submitted_since: datetime | None = None,
    only_stuck: bool = False,
    before: str | None = None,
    page: int = PAGE,
) -> Iterator[RunRecord]:
    """Runs newest first matching every filter, read `page` at a time, after the run `before`.

    `only_stuck` reads running runs only (a caller asking for another status gets none)."""
    if only_stuck and status not in (None, RunStatus.RUNNING):
        return
    status = RunStatus.RUNNING if only_stuck else status
    while True:
        rows = store.page_runs(status=status, queue=queue, task=task, tags=tags, before=before, limit=page)
        for run in rows:
            if submitted_since is not None and run.submitted_at < submitted_since:
                return
            if not only_stuck or is_stuck(run, now):
                yield run
        if len(rows) < page:
            return
        before = rows[-1].id


def workers_of_running(store: Store, runs: list[RunRecord]) -> dict[str, WorkerRecord]:
    """The registry by worker id when any of `runs` is running (its worker's heartbeat is judged), else empty."""
    if not any(run.status is RunStatus.RUNNING for run in runs):
        return {}
    return {worker.id: worker for worker in store.list_workers()}


def heartbeat_lost_s(run: RunRecord, workers: Mapping[str, WorkerRecord]) -> float | None:
    """A running run whose worker's heartbeat is lost: seconds since that worker's last heartbeat
    (the store's clock). None otherwise, and when the registry no longer has the worker.

    Such a run reads running until its lease expires (stuck), then until a sweep; its worker has
    already stopped, so this is said as soon as the heartbeat is late."""
    worker = workers.get(run.worker_id or "") if run.status is RunStatus.RUNNING else None
    if worker is None or not heartbeat_lost(worker.heartbeat_age, worker.lease_seconds):
        return None
    return round(worker.heartbeat_age, 1)
