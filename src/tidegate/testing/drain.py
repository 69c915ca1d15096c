"""`tidegate_drain`: run everything due now, in the test's process, through the real claim.

A drain is a real worker (`App.worker(drain="due")`) run until a claim finds
nothing due and nothing is in flight: runs are taken in claim order, by the
store's own cycle, so every limit (queues, partitions, tags, rates, pools,
admission) holds exactly as in production; there is no second scheduler to
disagree with it. A run scheduled later, a retry's backoff or a run its
limits hold back is left queued: advance the test's clock and drain again.

Before the worker starts, the drain does once what a worker's maintenance does
on its own timer: it fires the schedule ticks that are due and sweeps (runs
whose lease ran out, runs past their dispatch deadline), so a test that
advanced its clock sees those follow at once.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass

from tidegate.app import App, Task
from tidegate.domain.errors import ConfigurationError
from tidegate.domain.model import RunRecord, RunStatus
from tidegate.engine.operators.events import events_after, last_event_id
from tidegate.engine.operators.runs import get_run
from tidegate.engine.operators.sweep import sweep_now
from tidegate.engine.runtime import schedules
from tidegate.worker.loop import Worker

DEFAULT_CAP = 1000  # attempts one drain runs before it calls the loop a runaway
EVENTS_PAGE = 1000
STOP_SECONDS = 30.0  # how long a stopped runaway's attempts in flight may take to end


class DrainRunaway(AssertionError):
    """The drain ran its cap of attempts and runs were still due: a task that keeps resubmitting."""


@dataclass(frozen=True)
class DrainResult:
    """What one drain ran: every attempt in claim order, and each run as it stands afterwards."""

    attempts: tuple[tuple[str, int], ...]  # (run id, attempt number), in the order they were claimed
    runs: tuple[RunRecord, ...]  # each run claimed, in the order first claimed, read after the drain

    def _count(self, status: RunStatus) -> int:
        return sum(1 for run in self.runs if run.status is status)

    @property
    def completed(self) -> int:
        return self._count(RunStatus.COMPLETED)

    @property
    def failed(self) -> int:
        return self._count(RunStatus.FAILED)

    @property
    def canceled(self) -> int:
        return self._count(RunStatus.CANCELED)

    @property
    def waiting(self) -> int:
        """Parents still waiting on children (whose runs were not due, or are held back)."""
        return self._count(RunStatus.WAITING)

    @property
    def queued(self) -> int:
        """Runs that ran and are queued again: a retry whose backoff has not passed."""
        return self._count(RunStatus.QUEUED)

    def of(self, task: Task | str) -> list[RunRecord]:
        """The runs of one task (a `Task` or its name), in claim order."""
        name = task if isinstance(task, str) else task.name
        return [run for run in self.runs if run.task == name]

    def __len__(self) -> int:
        return len(self.runs)


def drain(
    app: App, *, max_workers: int = 1, cap: int = DEFAULT_CAP, queues: Sequence[str] | None = None
) -> DrainResult:
    """Run every run of `app`'s queues (or `queues`) that is due, until none is; what ran.

    `max_workers` runs at once (1: one after another, in claim order; more: as a
    worker with that capacity would, limits included). Past `cap` attempts it
    stops the worker and raises `DrainRunaway`.
    """
    if isinstance(cap, bool) or not isinstance(cap, int) or cap < 1:
        raise ConfigurationError(f"cap must be at least 1 attempt, got {cap!r}")
    store = app.store
    schedules.fire_due(store)
    sweep_now(store, "tidegate-drain")
    since = last_event_id(store)
    worker = app.worker(queues=queues, max_workers=max_workers, drain="due")
    errors: list[BaseException] = []
    thread = threading.Thread(target=_serve, args=(worker, errors), name="tidegate-drain", daemon=True)
    thread.start()
    try:
        while thread.is_alive():
            thread.join(0.02)  # a drain ends by itself; the cap is checked between these looks
            if worker.completed >= cap and thread.is_alive():
                raise DrainRunaway(
                    f"tidegate_drain ran {worker.completed} attempts (its cap is {cap}) and runs were still due:"
                    " a task that submits runs forever? Pass cap= to allow more."
                )
    finally:
        if thread.is_alive():
            # Its attempts in flight end first (a grace, not an interrupt), so no task thread
            # still uses the app when the test goes on or closes it.
            worker.request_stop(grace=STOP_SECONDS)
            thread.join(STOP_SECONDS * 2)
    if errors:
        raise errors[0]
    return _what_ran(app, worker.id, since)


def _serve(worker: Worker, errors: list[BaseException]) -> None:
    try:
        worker.run()
    except BaseException as error:  # handed to the test's thread, which raises it
        errors.append(error)


def _what_ran(app: App, worker_id: str, since: int) -> DrainResult:
    """The drain's claims, read from the events it wrote (every claim writes `RunDequeued`)."""
    store = app.store
    attempts: list[tuple[str, int]] = []
    after = since
    while page := events_after(store, after, EVENTS_PAGE):
        after = page[-1].id
        for event in page:
            if event.type == "RunDequeued" and event.metadata.get("worker") == worker_id:
                attempts.append((event.run_id, int(event.metadata["attempt"])))
    first_claimed = list(dict.fromkeys(run_id for run_id, _ in attempts))
    runs = [run for run_id in first_claimed if (run := get_run(store, run_id)) is not None]
    return DrainResult(tuple(attempts), tuple(runs))
