"""The sweep's rescue of lost attempts, shared by both adapters.

One sweeper at a time (a leased row, `take_lock` on SWEEPER_LOCK) recovers
runs whose lease ran out or whose worker stopped heartbeating, repairs leaked
scope holders, expires step holders and fails runs past their dispatch
deadline, all in one transaction.

The store reads the lost attempts (locked, in the sweep's transaction), the
pure rule `domain.recovery.rescue_lost` decides them, one crash per worker, and the store writes
the verdicts as one batch with their events. The rule exists once; the two
dialects only read and write.

A verdict the database refuses (any error writing that one run's row) must
not hold up the others, or one bad row would stop recovery for the whole
store on every pass: `write_isolated` writes them all at once, and only if
that fails, each on its own; the ones still refused are reported by run id
(`SweepReport.unapplied`) and left as they were, to be tried at the next pass.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from tidegate.domain.events import rescued
from tidegate.domain.model import SweepReport
from tidegate.domain.recovery import LostAttempt, Rescue, rescue_lost

Row = Mapping[str, Any]

SWEEPER_LOCK = "sweeper"  # the leased row (tidegate_locks) that lets one sweeper at a time work


def decide(rows: Sequence[Row]) -> list[tuple[LostAttempt, Rescue]]:
    """The verdict for each lost attempt a `sweep_lost` query returned."""
    return rescue_lost(
        [
            LostAttempt(
                run_id=row["id"],
                attempt=row["attempt"],
                max_attempts=row["max_attempts"],
                worker=row["worker_id"],
                lapsed=bool(row["lapsed"]),
                started=bool(row["started"]),
                suspect=bool(row["suspect"]),
                beside=row["beside"],
                cancel_requested=bool(row["cancel_requested"]),
                lost_at=_iso(row["lost_at"]),
                last_heartbeat=_iso(row["last_heartbeat"]),
            )
            for row in rows
        ]
    )


def _iso(epoch: float | None) -> str | None:
    """A `sweep_lost` time (seconds since the epoch, both dialects) as the ISO text events carry."""
    return None if epoch is None else datetime.fromtimestamp(float(epoch), UTC).isoformat()


def payload(decided: Sequence[tuple[LostAttempt, Rescue]]) -> list[dict[str, Any]]:
    """The verdicts as rows for the `sweep_recover` write (a JSON list), in run id order."""
    rows = []
    for lost, verdict in sorted(decided, key=lambda pair: pair[0].run_id):
        event = rescued(verdict, lost)
        rows.append(
            {
                "id": verdict.run_id,
                "attempt": verdict.attempt,
                "status": verdict.status,
                "error": verdict.error,
                "max_attempts": verdict.max_attempts,
                "uncharged": int(verdict.uncharged),
                "suspect": verdict.suspect,
                "group": verdict.group,
                "worker": lost.worker,
                "event": event.type,
                "metadata": event.metadata,
            }
        )
    return rows


def write_isolated(
    verdicts: list[dict[str, Any]],
    write: Callable[[list[dict[str, Any]]], Mapping[str, str]],
    refused: tuple[type[Exception], ...],
) -> tuple[dict[str, str], dict[str, str]]:
    """Write `verdicts` with `write` (all or none of those it is given, in a savepoint of its own, raising
    one of `refused` when the database refuses them): the runs written (id -> status), and the runs
    whose verdict the database refused on its own (id -> the error's first line)."""
    if not verdicts:
        return {}, {}
    try:
        return dict(write(verdicts)), {}
    except refused:
        pass  # some verdict is refused: find which, writing each alone
    written: dict[str, str] = {}
    unapplied: dict[str, str] = {}
    for verdict in verdicts:
        try:
            written.update(write([verdict]))
        except refused as error:
            unapplied[verdict["id"]] = _first_line(error)
    return written, unapplied


def _first_line(error: Exception) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__


def add_to_report(report: SweepReport, written: Mapping[str, str]) -> None:
    """Runs the write changed (id -> new status), as the sweep reports them."""
    for run_id, status in sorted(written.items()):
        (report.requeued if status == "queued" else report.failed).append(run_id)
