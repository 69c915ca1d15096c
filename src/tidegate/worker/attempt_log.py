"""One log line per attempt outcome, so a worker's log says what happened to every run.

At INFO, on the `tidegate.worker` logger: completed (with its duration),
failed (the error's first line, and whether it will be retried and when),
timed out, canceled, re-queued or failed by the sweeper; each names the run
id, the task and the attempt. The traceback of a failure goes to the
`tidegate.worker.tracebacks` logger at DEBUG: shown with `--log-level debug`,
or alone with `--log-tracebacks` (which lowers only that logger's level).
"""

from __future__ import annotations

import logging

from tidegate.domain.model import ClaimedRun, Outcome, OutcomeKind, RunStatus, SweepReport
from tidegate.storage.port import Store

log = logging.getLogger("tidegate.worker")
tracebacks = logging.getLogger("tidegate.worker.tracebacks")


def _headline(error: str | None) -> tuple[str, str]:
    """The error's first line and the rest (the traceback, when the worker caught one)."""
    lines = (error or "").strip().splitlines()
    return (lines[0] if lines else "unknown error"), "\n".join(lines[1:])


def attempt_ended(run: ClaimedRun, outcome: Outcome, seconds: float) -> None:
    """The line for an attempt this worker settled (and, at DEBUG, its traceback)."""
    where = f"run {run.id} task={run.task} attempt={run.attempt}/{run.max_attempts}"
    if outcome.kind is OutcomeKind.COMPLETED:
        log.info("%s completed in %.3fs", where, seconds)
        return
    if outcome.kind is OutcomeKind.CANCELED:
        log.info("%s canceled after %.3fs", where, seconds)
        return
    headline, trace = _headline(outcome.error)
    ended = "timed out" if headline.startswith("Timeout:") else "failed"
    then = "no attempt left" if outcome.retry_delay is None else f"will retry in {outcome.retry_delay:.1f}s"
    log.info("%s %s after %.3fs: %s (%s)", where, ended, seconds, headline, then)
    if trace:
        tracebacks.debug("%s: %s\n%s", where, headline, trace)


def swept(store: Store, report: SweepReport) -> None:
    """A line per run of any worker the sweeper recovered (its lease expired or its worker is gone)."""
    for run_id in [*report.requeued, *report.failed]:
        run = store.get_run(run_id)
        if run is None:
            continue
        verb = "re-queued" if run.status is RunStatus.QUEUED else run.status.value
        log.info(
            "run %s task=%s attempt=%s/%s %s by the sweeper (its lease expired or its worker is gone)",
            run.id,
            run.task,
            run.attempt,
            run.max_attempts,
            verb,
        )
