"""How many runs (and steps) held each scope at once, replayed from the store's events.

The demo's claim that no limit was exceeded is checked against what the
store recorded, not against anything the demo saw live: every attempt takes
its scopes' slots when it is claimed (`RunDequeued`) and gives them back when
it ends (`RunCompleted`, `RunFailed`, `RunRetried`, `RunCanceled`,
`RunRequeued`). Replaying those events per scope gives the most runs that
held it at once, retried attempts included.

Events are replayed in id order, not by timestamp: a writer stamps its
transaction with the time it started, before it waited for the write lock,
so stamps can be out of commit order, while ids are handed out inside the
transaction (on SQLite, in commit order). A claim that needed a freed slot
read the release that freed it, so its event has the larger id.

Pools are replayed the same way from step events: a step takes its slots at
`StepSlotClaimed` and gives them back at `StepSlotReleased`, or when its run
ends (which frees every slot the run's steps still hold).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from tidegate.cli.scopes import natural_key
from tidegate.domain.model import EventRecord, RunRecord
from tidegate.domain.scopes import GLOBAL, Rules

CLAIM = "RunDequeued"
RELEASES = frozenset({"RunCompleted", "RunFailed", "RunRetried", "RunCanceled", "RunRequeued"})
BLOCKED = "RunBlocked"
SLOT_CLAIM = "StepSlotClaimed"
SLOT_RELEASE = "StepSlotReleased"
SLOT_WAIT = "StepSlotWaiting"


@dataclass(frozen=True)
class ScopeTally:
    scope: str
    limit: int
    max_seen: int  # the most attempts that held the scope at once
    runs: int  # runs that needed a slot of it
    held_back: int  # of those, runs a claim skipped at least once because this scope was full

    @property
    def kept(self) -> bool:
        return self.max_seen <= self.limit


def tally(runs: Sequence[RunRecord], events: Mapping[str, Iterable[EventRecord]], rules: Rules) -> list[ScopeTally]:
    """Per limited scope: its limit, the most runs holding it at once, and how many runs it held back."""
    needs = {run.id: rules.scopes_for(run.queue, run.partition, run.tags) for run in runs}
    limits = {need.key: need.limit for scopes in needs.values() for need in scopes}
    users: Counter[str] = Counter(need.key for scopes in needs.values() for need in scopes)
    held_back: dict[str, set[str]] = defaultdict(set)
    timeline: list[tuple[int, str, bool]] = []
    for run in runs:
        for event in events.get(run.id, ()):
            if event.type == CLAIM:
                timeline.append((event.id, run.id, True))
            elif event.type in RELEASES:
                timeline.append((event.id, run.id, False))
            elif event.type == BLOCKED:
                for item in event.metadata.get("blocked_by") or ():
                    if isinstance(item, dict) and "scope" in item:
                        held_back[item["scope"]].add(run.id)
    holding: set[str] = set()
    current: Counter[str] = Counter()
    peak: Counter[str] = Counter()
    for _, run_id, claimed in sorted(timeline):
        if claimed == (run_id in holding):
            continue  # a release without a claim (canceled while queued), or a repeated claim
        if claimed:
            holding.add(run_id)
        else:
            holding.discard(run_id)
        step = 1 if claimed else -1
        for need in needs[run_id]:
            current[need.key] += step
            peak[need.key] = max(peak[need.key], current[need.key])
    return sorted(
        (ScopeTally(scope, limit, peak[scope], users[scope], len(held_back[scope])) for scope, limit in limits.items()),
        key=lambda t: (t.scope != GLOBAL, not t.scope.startswith("queue:"), natural_key(t.scope)),
    )


def pool_tally(events: Mapping[str, Iterable[EventRecord]], limits: Mapping[str, int]) -> list[ScopeTally]:
    """Per configured pool: its limit, the most slots held at once, how many steps used it and
    how many of those waited for it at least once."""
    timeline = sorted((event for run_events in events.values() for event in run_events), key=lambda event: event.id)
    held: dict[tuple[str, str | None], dict[str, int]] = {}
    current: Counter[str] = Counter()
    peak: Counter[str] = Counter()
    users: dict[str, set[tuple[str, str | None]]] = defaultdict(set)
    waited: dict[str, set[tuple[str, str | None]]] = defaultdict(set)
    for event in timeline:
        holder = (event.run_id, event.step_key)
        if event.type == SLOT_CLAIM:
            for pool, slots in (event.metadata.get("pools") or {}).items():
                if pool in limits and pool not in held.setdefault(holder, {}):
                    held[holder][pool] = slots
                    users[pool].add(holder)
                    current[pool] += slots
                    peak[pool] = max(peak[pool], current[pool])
        elif event.type == SLOT_RELEASE:
            for pool in event.metadata.get("pools") or {}:
                current[pool] -= held.get(holder, {}).pop(pool, 0)
        elif event.type == SLOT_WAIT:
            for item in event.metadata.get("blocked_by") or ():
                if isinstance(item, dict) and item.get("pool") in limits:
                    waited[item["pool"]].add(holder)
        elif event.type in RELEASES:
            for key in [key for key in held if key[0] == event.run_id]:
                for pool, slots in held.pop(key).items():
                    current[pool] -= slots
    return [
        ScopeTally(f"pool:{pool}", limit, peak[pool], len(users[pool]), len(waited[pool]))
        for pool, limit in sorted(limits.items())
    ]
