"""Why a queued run is not running now: derived from the rules and the live usage, never stored.

One answer for every surface: `queue why` and `GET /runs/{id}/why`
(`engine.operators.why`), every list of queued runs (`queue list`, `GET /api/v1/queue`,
`/queue`, a run's page and JSON) and every count of blocked runs (the
overview, `/limits`, `GET /api/v1/queues`, `/metrics`). A claim records a
reason only for the runs it happens to read (a worker that finds every scope
full only looks, `peek_cycle`, and reads none), so a stored reason cannot
answer for the rest; the answer is instead computed from what decides a
claim: the scopes the run needs (`Rules.scopes_for`), the slots in use of
each (the sum of its holder rows, read once for a whole list), the pauses,
and its rates (its queue's and its tags'): the stored rate states and the
database's time of the read (`RateStates`), asked exactly as the claim's
charge asks them (`domain.rates.held`), so a rate-blocked run is named
`rate:QUEUE[/PARTITION]` or `rate:tag:KEY=VALUE` with the time until its next
allowed start everywhere.
Runs of one shape (queue, partition, tags) share the answer, so a count reads
queued runs grouped by shape, never the runs themselves.

The worker-capacity layer `queue why` adds (every live worker serving the
queue is full) is not a block: the run is ready and waits for the next free
worker, which is what the lists say of it.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tidegate.domain.durations import format_duration
from tidegate.domain.rates import NS, Rate, RateStates, interval, window_key
from tidegate.domain.scopes import Rules, queue_scope
from tidegate.domain.transitions import has_room

RATE_COST = 1  # what one start takes of each window of its queue's rate (the claim's `Candidate.rate_cost`)


@dataclass(frozen=True)
class Check:
    """One scope a run needs: the slots in use of it now and its limit in force."""

    scope: str
    used: int
    limit: int
    per: float | None = None  # a rate: its window (s); `used` of `limit` per `per` are taken
    held: bool = False  # a rate that refuses the start now
    allowed_in: float | None = 0.0  # a held rate: seconds until its next start is allowed (None: never)

    @property
    def ok(self) -> bool:
        return not self.held if self.per is not None else has_room(self.used, self.limit)

    def text(self) -> str:
        """`queue:api/customer_id=3 2/2`, or a rate's `rate:api/k1 60 of 60 per 1m used; next start
        allowed in 2.4s`: how every one-line view names a check."""
        if self.per is None:
            return f"{self.scope} {self.used}/{self.limit}"
        line = f"{self.scope} {self.used} of {self.limit} per {format_duration(self.per)} used"
        return f"{line}; {allowed_text(self.allowed_in)}" if not self.ok else line

    def item(self) -> dict[str, Any]:
        """The check as a block reason's item: scope, used, limit, and a rate's per and wait."""
        found: dict[str, Any] = {"scope": self.scope, "used": self.used, "limit": self.limit}
        if self.per is not None:
            found.update(per=self.per, next_allowed_in=self.allowed_in, detail=allowed_text(self.allowed_in))
        return found


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
        held.extend(check.item() for check in self.blocking)
        return held


def paused_text(queue: str) -> str:
    """A paused queue's block reason, worded once for every view."""
    return f"queue {queue} is paused"


def allowed_text(allowed_in: float | None) -> str:
    """'next start allowed in 2.4s': a rate-blocked run's wait, worded once for every view."""
    if allowed_in is None:
        return "its cost exceeds the rate's burst: it can never start"
    return (
        f"next start allowed in {allowed_in:.1f}s"
        if allowed_in < 60
        else f"next start allowed in {format_duration(allowed_in)}"
    )


def verdict(
    queue: str,
    partition: str,
    tags: Mapping[str, str],
    rules: Rules,
    usage: Mapping[str, int],
    rate_partition: str = "",
    rates: RateStates | None = None,
) -> Verdict:
    """Why a queued run of `queue`/`partition` carrying `tags` (charged to `rate_partition` of its
    queue's rate, and to its tags' rates) waits, given the slots in use per scope (`usage`, the sum of the live holder
    rows) and the rate states (`rates`; none read: no rate state, every window has room): the same
    scopes, room test and rate charge as the claim's decision (`domain.admission.admit`)."""
    checks = [Check(need.key, usage.get(need.key, 0), need.limit) for need in rules.scopes_for(queue, partition, tags)]
    for scope, windows in rules.rate_scopes(queue, rate_partition, tags):
        checks.append(rate_check(scope, windows, rates or RateStates()))
    return Verdict(queue, tuple(sorted(checks, key=lambda check: check.scope)), rules.is_paused(queue))


def rate_check(scope: str, windows: tuple[Rate, ...], rates: RateStates, cost: int = RATE_COST) -> Check:
    """A rate scope as a check: refused, its binding window full and the wait until every window
    allows a start of `cost`; allowed, the busiest window with the cost its state still counts."""
    refused = rates.held(scope, windows, cost)
    if refused is not None:
        wait = None if refused.retry_at is None else max(0.0, refused.retry_at - rates.now)
        limit = refused.rate.limit
        return Check(scope, limit, limit, refused.rate.seconds, held=True, allowed_in=wait)

    busiest = max(windows, key=lambda rate: window_used(scope, rate, rates) / rate.limit)
    return Check(scope, window_used(scope, busiest, rates), busiest.limit, busiest.seconds)


def window_used(scope: str, rate: Rate, rates: RateStates) -> int:
    """The cost one window of a rate scope still counts now: how far its stored state (GCRA's TAT)
    lies ahead of now, in emission intervals, at most the limit; 0 for a window never charged."""
    state = rates.states.get((scope, window_key(rate)))
    ahead = 0 if state is None else max(0, state - math.ceil(rates.now * NS))
    return min(rate.limit, -(-ahead // interval(rate)))


@dataclass(frozen=True)
class QueuedShape:
    """Queued runs that need the same scopes: `count` runs of one queue, partition and tag set."""

    queue: str
    partition: str
    tags: Mapping[str, str]
    count: int
    rate_partition: str = ""  # the partition of its queue's rate its runs are charged to


@dataclass(frozen=True)
class Tally:
    """Queued runs held back now: per queue, and per scope that holds them (a run blocked by two
    full scopes counts for each; a paused queue's runs count for `queue:NAME`)."""

    per_queue: Mapping[str, int] = field(default_factory=dict)
    per_scope: Mapping[str, int] = field(default_factory=dict)


def tally(
    shapes: Iterable[QueuedShape], rules: Rules, usage: Mapping[str, int], rates: RateStates | None = None
) -> Tally:
    """Count the blocked runs of `shapes` by the verdict of each shape."""
    per_queue: Counter[str] = Counter()
    per_scope: Counter[str] = Counter()
    for shape in shapes:
        found = verdict(shape.queue, shape.partition, shape.tags, rules, usage, shape.rate_partition, rates)
        if not found.blocked:
            continue
        per_queue[shape.queue] += shape.count
        for scope in {held["scope"] for held in found.reason() or ()}:
            per_scope[scope] += shape.count
    return Tally(dict(per_queue), dict(per_scope))
