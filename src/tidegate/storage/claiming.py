"""Choosing the candidates a claim considers, shared by both adapters.

The decision itself is pure (`domain.admission.admit`); what this module
decides is which queued rows to hand it, so that the read stays cheap when a
large backlog is blocked: a window in claim order per queue, and, when that
window is full of runs whose partition is saturated, the heads of the other
partitions found by skip-scan (one index seek per partition) instead of
walking the blocked backlog. Fair queues are always read per partition.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tidegate.domain.admission import Admission, Candidate, Saturation
from tidegate.domain.scopes import GLOBAL, Rules, queue_scope

MIN_WINDOW = 32
WINDOW_FACTOR = 4
MAX_PARTITIONS = 1000

Row = Mapping[str, Any]


class CandidateReader:
    """The three reads an adapter provides (inside its claim transaction)."""

    def __init__(
        self,
        window: Callable[[str, int], Sequence[Row]],
        partitions: Callable[[str, int], Sequence[str]],
        partition_head: Callable[[str, str, int], Sequence[Row]],
    ) -> None:
        self.window = window
        self.partitions = partitions
        self.partition_head = partition_head


def candidate_rows(
    queues: Sequence[str], claim_limit: int, rules: Rules, usage: Mapping[str, int], read: CandidateReader
) -> list[Row]:
    """The rows worth deciding on, at most a window per queue plus partition heads."""
    if claim_limit <= 0:
        return []
    window = max(MIN_WINDOW, WINDOW_FACTOR * claim_limit)
    global_full = _full(usage, GLOBAL, rules.global_limit())
    rows: dict[str, Row] = {}
    for queue in queues:
        config = rules.queues.get(queue)
        saturated = saturated_partitions(queue, usage, rules)
        if config is not None and config.ordering == "fair":
            found = _partition_heads(queue, claim_limit, saturated, read)
        else:
            found = list(read.window(queue, window))
            useful = sum(1 for row in found if row["partition_key"] not in saturated)
            if saturated and not global_full and len(found) == window and useful < claim_limit:
                found += _partition_heads(queue, claim_limit, saturated, read)
        for row in found:
            rows.setdefault(row["id"], row)
    return list(rows.values())


def _partition_heads(queue: str, claim_limit: int, saturated: set[str], read: CandidateReader) -> list[Row]:
    """The first runs of each partition: enough of each to fill `claim_limit` taking turns.

    A saturated partition still shows its head, so its block reason is recorded.
    """
    partitions = list(read.partitions(queue, MAX_PARTITIONS))
    open_partitions = max(1, sum(1 for partition in partitions if partition not in saturated))
    per_partition = min(claim_limit, -(-claim_limit // open_partitions) + 1)
    heads: list[Row] = []
    for partition in partitions:
        heads.extend(read.partition_head(queue, partition, 1 if partition in saturated else per_partition))
    return heads


def saturated_partitions(queue: str, usage: Mapping[str, int], rules: Rules) -> set[str]:
    """Partitions of `queue` whose shared limit is reached (only scopes with holders can be)."""
    prefix = f"queue:{queue}"
    found = set()
    for scope in usage:
        if scope == prefix:
            partition = ""
        elif scope.startswith(prefix + "/"):
            partition = scope[len(prefix) + 1:]
        else:
            continue
        if _full(usage, queue_scope(queue, partition), rules.queue_limit(queue, partition)):
            found.add(partition)
    return found


def _full(usage: Mapping[str, int], scope: str, limit: int | None) -> bool:
    return limit is not None and usage.get(scope, 0) >= limit


def to_candidate(row: Row, rules: Rules, tags: Mapping[str, str], scheduled_at: float) -> Candidate:
    config = rules.queues.get(row["queue"])
    return Candidate(
        id=row["id"],
        task=row["task"],
        queue=row["queue"],
        partition=row["partition_key"],
        tags=tags,
        priority=row["priority"],
        scheduled_at=scheduled_at,
        ordering=config.ordering if config is not None else "priority",
    )


def reason_json(saturations: Sequence[Saturation]) -> str:
    return json.dumps([{"scope": s.scope, "used": s.used, "limit": s.limit} for s in saturations], separators=(",", ":"))


def changed_block_reasons(decision: Admission, current: Mapping[str, Any]) -> dict[str, str]:
    """Block reasons (as JSON text) that differ from what the rows hold now."""
    changed = {}
    for run_id, saturations in decision.blocked.items():
        text = reason_json(saturations)
        existing = current.get(run_id)
        if existing is None or (json.loads(existing) if isinstance(existing, str) else existing) != json.loads(text):
            changed[run_id] = text
    return changed
