"""Retention through the port: delete finished runs past an age, batch after batch.

The sweeper calls `prune` after each sweep it did, with a cap on the batches so
one sweep never works for long; `tidegate db prune` calls it without a cap and
shows each batch as progress. Each batch is its own short transaction
(`Store.prune_runs`), so pruning a large backlog never holds a lock for long.
"""

from __future__ import annotations

from collections.abc import Callable

from tidegate.domain.retention import PRUNE_BATCH, PruneReport
from tidegate.storage.port import Store


def prune(
    store: Store,
    older_than: float,
    *,
    max_batches: int | None = None,
    batch: int = PRUNE_BATCH,
    on_batch: Callable[[PruneReport], None] | None = None,
) -> PruneReport:
    """Delete finished runs that ended more than `older_than` seconds ago, until a batch comes back
    short (nothing more is that old) or after `max_batches`; the total deleted."""
    total = PruneReport()
    done = 0
    while max_batches is None or done < max_batches:
        report = store.prune_runs(older_than, batch)
        done += 1
        total.add(report)
        if on_batch is not None:
            on_batch(report)
        if report.runs < batch and report.ticks < batch:
            break
    return total
