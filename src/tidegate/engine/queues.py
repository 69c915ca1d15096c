"""Queues as an operator sees them: limits in force, run counts, paused; pause and resume.

A pause is a rule like a limit (stored with the rules, under their version,
audited as a LimitChanged): the claim decision refuses a paused queue's runs
(`domain.admission.admit`) and the claim does not even read them
(`storage.claiming.open_queues`). Submits still queue: the backlog waits for
the resume instead of being turned away.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from tidegate.domain import names
from tidegate.domain.errors import QueueNotFound
from tidegate.domain.limits import QueueConfig
from tidegate.domain.model import QueueCounts, RunRecord, RunStatus
from tidegate.domain.scopes import Rules
from tidegate.storage.port import Store


@dataclass(frozen=True)
class QueueSummary:
    config: QueueConfig  # as declared in code
    limit: int | None  # the shared limit in force for each partition (a live override wins)
    paused: bool
    counts: QueueCounts

    @property
    def name(self) -> str:
        return self.config.name


@dataclass(frozen=True)
class Waiting:
    position: int  # 1-based, in its own queue's claim order
    run: RunRecord


def claim_order(store: Store, queue: str | None, limit: int) -> tuple[list[Waiting], int]:
    """The first `limit` queued runs in claim order (of `queue`, or of every queue), each with its
    position in its own queue, and how many are queued there: `GET /api/v1/queue` and `/queue`."""
    runs = store.list_queued(queue=queue, limit=limit)
    total = store.status_counts(queue=queue)[RunStatus.QUEUED]
    positions: Counter[str] = Counter()  # per queue: the first N of any queue are all in the list
    waiting = []
    for run in runs:
        positions[run.queue] += 1
        waiting.append(Waiting(positions[run.queue], run))
    return waiting, total


def summaries(store: Store) -> list[QueueSummary]:
    """Every declared queue (in code, or implied by a task), by name."""
    rules = store.rules()
    counts = store.queue_counts()
    return [_summary(rules, name, counts.get(name, QueueCounts())) for name in sorted(rules.queues)]


def summary(store: Store, queue: str) -> QueueSummary:
    name = names.check_name("queue", queue)
    rules = store.rules()
    if name not in rules.queues:
        raise QueueNotFound(f"no queue named {name!r} is declared")
    return _summary(rules, name, store.queue_counts().get(name, QueueCounts()))


def pause(store: Store, queue: str) -> bool:
    """Pause a queue: its runs stay queued and none is claimed until resumed. True if it changed."""
    return store.set_queue_paused(names.check_name("queue", queue), True)


def resume(store: Store, queue: str) -> bool:
    """Resume a paused queue: its runs are claimable again (workers are woken). True if it changed."""
    return store.set_queue_paused(names.check_name("queue", queue), False)


def paused_reason(queue: str) -> str:
    """The block reason of every run of a paused queue, worded once for every view."""
    return f"queue {queue} is paused"


def held_by_pause(run: RunRecord, rules: Rules) -> bool:
    return run.status is RunStatus.QUEUED and rules.is_paused(run.queue)


def block_reason_now(run: RunRecord, rules: Rules) -> list[dict[str, Any]] | None:
    """A run's block reason as every view shows it: a queued run of a paused queue is held by the pause.

    The stored reason is what its last claim recorded, before the pause or regardless
    of it (a paused queue's runs are not even read by claims), so it would name the
    wrong cause: the pause replaces it while it lasts.
    """
    if held_by_pause(run, rules):
        return [{"scope": f"queue:{run.queue}", "reason": "paused", "detail": paused_reason(run.queue)}]
    return run.block_reason


def _summary(rules: Rules, name: str, counts: QueueCounts) -> QueueSummary:
    return QueueSummary(rules.queues[name], rules.queue_limit(name, ""), rules.is_paused(name), counts)
