"""Why a queued run is not running now: derived from the rules and the live usage, never stored.

One answer for every surface: `queue why` and `GET /runs/{id}/why`
(`engine.why`), every list of queued runs (`queue list`, `GET /api/v1/queue`,
`/queue`, a run's page and JSON) and every count of blocked runs (the
overview, `/limits`, `GET /api/v1/queues`, `/metrics`). A claim records a
reason only for the runs it happens to read (a worker that finds every scope
full only looks, `peek_cycle`, and reads none), so a stored reason cannot
answer for the rest; the answer is instead computed from what decides a
claim: the scopes the run needs (`Rules.scopes_for`), the slots in use of
each (the sum of its holder rows, read once for a whole list) and the pauses.
Runs of one shape (queue, partition, tags) share the answer, so a count reads
queued runs grouped by shape, never the runs themselves.

The worker-capacity layer `queue why` adds (every live worker serving the
queue is full) is not a block: the run is ready and waits for the next free
worker, which is what the lists say of it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tidegate.domain.scopes import Rules, queue_scope
from tidegate.domain.transitions import has_room


@dataclass(frozen=True)
class Check:
    """One scope a run needs: the slots in use of it now and its limit in force."""

    scope: str
    used: int
    limit: int

    @property
    def ok(self) -> bool:
        return has_room(self.used, self.limit)


@dataclass(frozen=True)
class Verdict:
    """Everything that decides whether a queued run of one shape may be claimed now."""

    queue: str
    checks: tuple[Check, ...]  # every limited scope the run needs, in key order
    paused: bool  # its queue is paused: none of its runs is claimed until resumed

    @property
    def blocking(self) -> tuple[Check, ...]:
        """The full scopes, in key order."""
        return tuple(check for check in self.checks if not check.ok)

    @property
    def blocked(self) -> bool:
        return self.paused or bool(self.blocking)

    def reason(self) -> list[dict[str, Any]] | None:
        """The block reason as the lists carry it (None: ready): the pause first, then each full
        scope with its used/limit, the scopes `queue why` names under "Blocked by"."""
        if not self.blocked:
            return None
        held: list[dict[str, Any]] = []
        if self.paused:
            held.append({"scope": queue_scope(self.queue, ""), "reason": "paused", "detail": paused_text(self.queue)})
        held.extend({"scope": c.scope, "used": c.used, "limit": c.limit} for c in self.blocking)
        return held


def paused_text(queue: str) -> str:
    """A paused queue's block reason, worded once for every view."""
    return f"queue {queue} is paused"


def verdict(queue: str, partition: str, tags: Mapping[str, str], rules: Rules, usage: Mapping[str, int]) -> Verdict:
    """Why a queued run of `queue`/`partition` carrying `tags` waits, given the slots in use per
    scope (`usage`, the sum of the live holder rows): the same scopes and the same room test as
    the claim's decision (`domain.admission.admit`)."""
    checks = tuple(
        Check(need.key, usage.get(need.key, 0), need.limit) for need in rules.scopes_for(queue, partition, tags)
    )
    return Verdict(queue, checks, rules.is_paused(queue))


@dataclass(frozen=True)
class QueuedShape:
    """Queued runs that need the same scopes: `count` runs of one queue, partition and tag set."""

    queue: str
    partition: str
    tags: Mapping[str, str]
    count: int


@dataclass(frozen=True)
class Tally:
    """Queued runs held back now: per queue, and per scope that holds them (a run blocked by two
    full scopes counts for each; a paused queue's runs count for `queue:NAME`)."""

    per_queue: Mapping[str, int] = field(default_factory=dict)
    per_scope: Mapping[str, int] = field(default_factory=dict)


def tally(shapes: Iterable[QueuedShape], rules: Rules, usage: Mapping[str, int]) -> Tally:
    """Count the blocked runs of `shapes` by the verdict of each shape."""
    per_queue: Counter[str] = Counter()
    per_scope: Counter[str] = Counter()
    for shape in shapes:
        found = verdict(shape.queue, shape.partition, shape.tags, rules, usage)
        if not found.blocked:
            continue
        per_queue[shape.queue] += shape.count
        for scope in {held["scope"] for held in found.reason() or ()}:
            per_scope[scope] += shape.count
    return Tally(dict(per_queue), dict(per_scope))
