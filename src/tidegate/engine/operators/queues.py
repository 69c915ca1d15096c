"""Queues as an operator sees them: limits in force, run counts, paused; pause and resume; and why
each queued run waits now (`Live`, `blocked`: `domain.blocking` on one read of the rules and usage).

A pause is a rule like a limit (stored with the rules, under their version,
audited as a LimitChanged): the claim decision refuses a paused queue's runs
(`domain.admission.admit`) and the claim does not even read them
(`domain.claim_plan`: a claim plans only open queues). Submits still queue: the backlog waits for
the resume instead of being turned away.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tidegate.domain import names
from tidegate.domain.blocking import QueuedShape, Tally, Verdict, tally, verdict
from tidegate.domain.errors import QueueNotFound
from tidegate.domain.limits import QueueConfig
from tidegate.domain.model import QueueCounts, RunRecord, RunStatus
from tidegate.domain.rates import RateStates
from tidegate.domain.scopes import Rules
from tidegate.storage.port import Store


@dataclass(frozen=True)
class QueueSummary:
    config: QueueConfig  # as declared in code
    limit: int | None  # the shared limit in force for each partition (a live override wins)
    paused: bool
    counts: QueueCounts
    blocked: int  # queued runs a full scope or the pause holds back now (domain.blocking)

    @property
    def name(self) -> str:
        return self.config.name


@dataclass(frozen=True)
class Waiting:
    position: int  # 1-based rank in the list's claim order (priority, then age), one count across its queues
    run: RunRecord
    verdict: Verdict  # why it waits now, as `queue why` says


def claim_order(store: Store, queue: str | None, limit: int) -> tuple[list[Waiting], int]:
    """The first `limit` queued runs in claim order (of `queue`, or of every queue), each with its
    rank in that order and why it waits now, and how many are queued there: `queue list`,
    `GET /api/v1/queue` and `/queue`. A mixed list ranks its runs once across queues (a per-queue
    count would read 1, 1, 2, 1, 2 down a list sorted by priority); `queue why` gives a run's place
    in its own queue."""
    runs = store.list_queued(queue=queue, limit=limit)
    total = store.status_counts(queue=queue)[RunStatus.QUEUED]
    now = live(store)
    return [Waiting(rank, run, now.verdict(run)) for rank, run in enumerate(runs, start=1)], total


def summaries(store: Store) -> list[QueueSummary]:
    """Every declared queue (in code, or implied by a task), by name."""
    rules, counts, held = store.rules(), store.queue_counts(), blocked(store)
    return [_summary(rules, name, counts.get(name, QueueCounts()), held) for name in sorted(rules.queues)]


def summary(store: Store, queue: str) -> QueueSummary:
    name = names.check_name("queue", queue)
    rules = store.rules()
    if name not in rules.queues:
        raise QueueNotFound(f"no queue named {name!r} is declared")
    return _summary(rules, name, store.queue_counts().get(name, QueueCounts()), blocked(store))


def pause(store: Store, queue: str) -> bool:
    """Pause a queue: its runs stay queued and none is claimed until resumed. True if it changed."""
    return store.set_queue_paused(names.check_name("queue", queue), True)


def resume(store: Store, queue: str) -> bool:
    """Resume a paused queue: its runs are claimable again (workers are woken). True if it changed."""
    return store.set_queue_paused(names.check_name("queue", queue), False)


@dataclass(frozen=True)
class Live:
    """One read of what decides whether a queued run is blocked (the rules in force, the slots in
    use per scope, the rate states at the database's time), shared by every run of a list: each
    run's reason is `domain.blocking`'s verdict on it, the one `queue why` gives, whichever path
    the last claim took."""

    rules: Rules
    usage: Mapping[str, int]
    rates: RateStates

    def verdict(self, run: RunRecord) -> Verdict:
        return verdict(run.queue, run.partition, run.tags, self.rules, self.usage, run.rate_partition, self.rates)

    def reason(self, run: RunRecord) -> list[dict[str, Any]] | None:
        """A queued run's block reason now (None: ready, or not queued)."""
        return self.verdict(run).reason() if run.status is RunStatus.QUEUED else None


def live(store: Store) -> Live:
    return Live(store.rules(), store.scope_usage(), store.rate_states())


def queued_shapes(store: Store) -> list[QueuedShape]:
    """The queued runs grouped by shape (queue, partition, tags), with a count each."""
    return store.queued_shapes()


def blocked(store: Store) -> Tally:
    """Queued runs blocked now, per queue and per scope: queued runs are read grouped by shape
    (queue, partition, tags), never one by one, so a large blocked backlog stays cheap."""
    now = live(store)
    return tally(queued_shapes(store), now.rules, now.usage, now.rates)


def _summary(rules: Rules, name: str, counts: QueueCounts, held: Tally) -> QueueSummary:
    blocked_now = held.per_queue.get(name, 0)
    return QueueSummary(rules.queues[name], rules.queue_limit(name, ""), rules.is_paused(name), counts, blocked_now)
