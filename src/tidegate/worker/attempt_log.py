"""One log line per lifecycle transition of a run on this worker, with stable field names.

On the `tidegate.worker` logger: completed (with its duration), failed (the
error's first line, no attempt left), retried (failed, and when it runs again),
snoozed (`raise Snooze`: when it runs again, its snoozes, whether overloaded),
canceled, waiting (for its children), resumed (a wait answered: its children
ended) and rescued (re-queued or failed by the sweeper) at INFO; claimed and
started at DEBUG (two lines more per attempt, for when they are wanted). Each
record carries its fields as attributes (`event`, `run_id`, `task`, `queue`,
`attempt`, `max_attempts`, `worker`, and `duration_ms`, `error`,
`retry_in_s`, `snooze_in_s`, `snoozes`, `overloaded`, `children`, `status` where they apply), so `--log-format json`
writes them as they are (cli/logs.py); the text format keeps the sentence.
The traceback of a failure goes to the `tidegate.worker.tracebacks` logger at
DEBUG: shown with `--log-level debug`, or alone with `--log-tracebacks`.
"""

from __future__ import annotations

import logging
from typing import Any

from opentelemetry.trace import Span

from tidegate.domain.model import ClaimedRun, Outcome, OutcomeKind, RunStatus, SweepReport
from tidegate.engine.runtime import tracing
from tidegate.storage.port import Store

log = logging.getLogger("tidegate.worker")
tracebacks = logging.getLogger("tidegate.worker.tracebacks")


def fields(event: str, run: ClaimedRun, worker: str | None, **more: Any) -> dict[str, Any]:
    """A transition's fields, named the same in every line (the JSON lines' keys)."""
    base = {
        "event": event,
        "run_id": run.id,
        "task": run.task,
        "queue": run.queue,
        "attempt": run.attempt,
        "max_attempts": run.max_attempts,
        "worker": worker,
    }
    return {**base, **{key: value for key, value in more.items() if value is not None}}


def _where(run: ClaimedRun) -> str:
    return f"run {run.id} task={run.task} attempt={run.attempt}/{run.max_attempts}"


def _headline(error: str | None) -> tuple[str, str]:
    """The error's first line and the rest (the traceback, when the worker caught one)."""
    lines = (error or "").strip().splitlines()
    return (lines[0] if lines else "unknown error"), "\n".join(lines[1:])


def claimed(run: ClaimedRun, worker: str, span: Span) -> None:
    if log.isEnabledFor(logging.DEBUG):
        queued_ms = round(run.queued_seconds * 1000, 1)
        more = fields("run.claimed", run, worker, queued_ms=queued_ms)
        with tracing.use(span):
            log.debug("%s claimed after %.3fs queued", _where(run), run.queued_seconds, extra=more)


def started(run: ClaimedRun, worker: str, span: Span) -> None:
    if log.isEnabledFor(logging.DEBUG):
        with tracing.use(span):
            log.debug("%s started", _where(run), extra=fields("run.started", run, worker))


def waiting(run: ClaimedRun, worker: str) -> None:
    log.info("%s waiting for its children", _where(run), extra=fields("run.waiting", run, worker))


def resumed(run: ClaimedRun, worker: str, children: int) -> None:
    more = fields("run.resumed", run, worker, children=children)
    log.info("%s resumed: its %d awaited children ended", _where(run), children, extra=more)


def attempt_ended(run: ClaimedRun, outcome: Outcome, seconds: float, worker: str, span: Span) -> None:
    """The line for an attempt this worker settled (and, at DEBUG, its traceback), written with
    its attempt's span current (so a log handler can join it to its trace). Nothing is built when
    neither line would be written: every attempt comes here."""
    failed = outcome.kind is OutcomeKind.FAILED
    if log.isEnabledFor(logging.INFO) or (failed and tracebacks.isEnabledFor(logging.DEBUG)):
        with tracing.use(span):
            _ended(run, outcome, seconds, worker)


def _ended(run: ClaimedRun, outcome: Outcome, seconds: float, worker: str) -> None:
    where, duration_ms = _where(run), round(seconds * 1000, 1)
    if outcome.kind is OutcomeKind.COMPLETED:
        more = fields("run.completed", run, worker, duration_ms=duration_ms)
        log.info("%s completed in %.3fs", where, seconds, extra=more)
        return
    if outcome.kind is OutcomeKind.CANCELED:
        log.info("%s canceled after %.3fs", where, seconds, extra=fields("run.canceled", run, worker))
        return
    if outcome.kind is OutcomeKind.SNOOZED:
        snoozed(run, outcome, duration_ms, worker)
        return
    headline, trace = _headline(outcome.error)
    ended = "timed out" if headline.startswith("Timeout:") else "failed"
    then = "no attempt left" if outcome.retry_delay is None else f"will retry in {outcome.retry_delay:.1f}s"
    event = "run.failed" if outcome.retry_delay is None else "run.retried"
    more = fields(event, run, worker, duration_ms=duration_ms, error=headline, retry_in_s=outcome.retry_delay)
    log.info("%s %s after %.3fs: %s (%s)", where, ended, seconds, headline, then, extra=more)
    if trace:
        tracebacks.debug("%s: %s\n%s", where, headline, trace)


def snoozed(run: ClaimedRun, outcome: Outcome, duration_ms: float, worker: str | None) -> None:
    """`raise Snooze(...)`: back in the queue, uncharged; `snoozes` counts this one."""
    delay = outcome.retry_delay or 0.0
    more = fields(
        "run.snoozed", run, worker, duration_ms=duration_ms, snooze_in_s=delay, snoozes=run.snoozes + 1,
        overloaded=outcome.overloaded,
    )  # fmt: skip
    overloaded = ", downstream overloaded" if outcome.overloaded else ""
    log.info("%s snoozed for %.1fs (snooze %d%s)", _where(run), delay, run.snoozes + 1, overloaded, extra=more)


def swept(store: Store, report: SweepReport) -> None:
    """A line per run of any worker the sweeper recovered (its lease expired or its worker is gone)."""
    for run_id in [*report.requeued, *report.failed]:
        run = store.get_run(run_id)
        if run is None:
            continue
        verb = "re-queued" if run.status is RunStatus.QUEUED else run.status.value
        more = {
            "event": "run.rescued",
            "run_id": run.id,
            "task": run.task,
            "queue": run.queue,
            "attempt": run.attempt,
            "max_attempts": run.max_attempts,
            "status": run.status.value,
        }
        log.info(
            "run %s task=%s attempt=%s/%s %s by the sweeper (its lease expired or its worker is gone)",
            run.id,
            run.task,
            run.attempt,
            run.max_attempts,
            verb,
            extra=more,
        )
