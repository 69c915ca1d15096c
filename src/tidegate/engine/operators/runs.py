"""Runs as operators see and handle them: one run with its steps, children and events; lists
newest first, filtered by age and stuckness, stuck ones flagged; counts; cancel and retry.

The CLI, the API and the dashboard all read and act through here, so the
filters, the one "stuck" rule (`domain.leases.stuck`) and the one "heartbeat
lost" rule (`domain.leases.heartbeat_lost`) are applied once. The
store pages by id (`Store.page_runs`); ids follow submit time, so an age
filter stops at the first run submitted before its cutoff, and a stuck filter
reads only running runs.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime

from tidegate.domain.children import ChildRecord
from tidegate.domain.leases import heartbeat_lost, stuck
from tidegate.domain.model import EventRecord, RunRecord, RunStatus, WorkerRecord
from tidegate.domain.steps import StepRecord
from tidegate.engine.operators.workers import list_workers
from tidegate.storage.port import Store

PAGE = 200  # runs read per page while filtering by age or stuckness


def get_run(store: Store, run_id: str) -> RunRecord | None:
    """The run with id `run_id`, or None."""
    return store.get_run(run_id)


@dataclass(frozen=True)
class RunDetail:
    """One run with everything its page shows: `runs show`, the dashboard's run page."""

    run: RunRecord
    steps: list[StepRecord]
    children: list[ChildRecord]
    events: list[EventRecord]


def detail(store: Store, run_id: str) -> RunDetail | None:
    """The run with id `run_id` with its steps, children and events, or None."""
    run = store.get_run(run_id)
    if run is None:
        return None
    return RunDetail(run, store.run_steps(run.id), store.run_children(run.id), store.run_events(run.id))


def run_steps(store: Store, run_id: str) -> list[StepRecord]:
    """A workflow run's steps, as its checkpoints recorded them."""
    return store.run_steps(run_id)


def run_children(store: Store, run_id: str) -> list[ChildRecord]:
    """The children a run triggered, in the order it triggered them."""
    return store.run_children(run_id)


def run_events(store: Store, run_id: str) -> list[EventRecord]:
    """A run's events, oldest first."""
    return store.run_events(run_id)


def cancel_run(store: Store, run_id: str) -> RunStatus:
    """Cancel a queued or waiting run now, or ask the worker of a running one to stop it, and the
    same for its unfinished children linked to it; the status after (RunNotFound: unknown id)."""
    return store.cancel_run(run_id)


def retry_run(store: Store, run_id: str) -> RunRecord:
    """A failed or canceled run queued again with one more attempt; RunNotRetryable otherwise."""
    return store.retry_run(run_id)


def queue_position(store: Store, run_id: str) -> tuple[int, int]:
    """A queued run's place in its queue's claim order (1 is next), and the queued runs of that queue."""
    return store.queue_position(run_id)


def page_runs(
    store: Store,
    *,
    status: RunStatus | None = None,
    queue: str | None = None,
    task: str | None = None,
    tags: Mapping[str, str] | None = None,
    before: str | None = None,
    limit: int = PAGE,
) -> list[RunRecord]:
    """One page of runs newest first matching every filter, after the run `before`."""
    return store.page_runs(status=status, queue=queue, task=task, tags=tags, before=before, limit=limit)


def status_counts(store: Store, queue: str | None = None) -> dict[RunStatus, int]:
    """Runs per status (of one queue, or all)."""
    return store.status_counts(queue=queue)


def run_counts(store: Store) -> dict[tuple[str, RunStatus], int]:
    """Runs per (queue, status), only the pairs that have any."""
    return store.run_counts()


def finished_count(store: Store, within: float) -> int:
    """Runs claimed and ended in the last `within` seconds (the store's clock)."""
    return store.finished_count(within)


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
        rows = page_runs(store, status=status, queue=queue, task=task, tags=tags, before=before, limit=page)
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
    return {worker.id: worker for worker in list_workers(store)}


def heartbeat_lost_s(run: RunRecord, workers: Mapping[str, WorkerRecord]) -> float | None:
    """A running run whose worker's heartbeat is lost: seconds since that worker's last heartbeat
    (the store's clock). None otherwise, and when the registry no longer has the worker.

    Such a run reads running until its lease expires (stuck), then until a sweep; its worker has
    already stopped, so this is said as soon as the heartbeat is late."""
    worker = workers.get(run.worker_id or "") if run.status is RunStatus.RUNNING else None
    if worker is None or not heartbeat_lost(worker.heartbeat_age, worker.lease_seconds):
        return None
    return round(worker.heartbeat_age, 1)
