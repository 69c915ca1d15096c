"""Retention: which runs the store may forget, and in what bites.

A long-lived database would grow without bound; finished runs (completed,
failed, canceled) older than `TIDEGATE_RETENTION` are deleted with their
events, step checkpoints and fired schedule ticks. Never a queued or running
run, nor anything of one. The sweeper deletes in batches of at most
`PRUNE_BATCH` runs, each its own short transaction, and at most
`PRUNE_BATCHES_PER_SWEEP` of them per sweep, so pruning never holds the
write lock (SQLite) or many row locks (PostgreSQL) for long.
"""

from __future__ import annotations

from dataclasses import dataclass

from tidegate.domain.model import FINISHED_STATUSES

PRUNE_BATCH = 500
PRUNE_BATCHES_PER_SWEEP = 10
PRUNABLE_STATUSES = tuple(sorted(status.value for status in FINISHED_STATUSES))


@dataclass(slots=True)
class PruneReport:
    """What pruning deleted (one batch, or the sum of several)."""

    runs: int = 0
    events: int = 0
    steps: int = 0
    ticks: int = 0

    def add(self, other: PruneReport) -> None:
        self.runs += other.runs
        self.events += other.events
        self.steps += other.steps
        self.ticks += other.ticks
