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
from dataclasses import dataclass, field

from tidegate.domain.model import EventRecord, RunRecord
from tidegate.domain.scopes import GLOBAL, Rules, ScopeNeed
from tidegate.engine.operators.limit_table import natural_key

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


def tally(runs: Sequence[RunRecord], events: Mapping[str, Sequence[EventRecord]], rules: Rules) -> list[ScopeTally]:
    """Per limited scope: its limit, the most runs holding it at once, and how many runs it held back."""
    needs = {run.id: rules.scopes_for(run.queue, run.partition, run.tags) for run in runs}
    limits = {need.key: need.limit for scopes in needs.values() for need in scopes}
    users: Counter[str] = Counter(need.key for scopes in needs.values() for need in scopes)
    held_back = _held_back(runs, events)
    peak = _peak_holders(_claim_timeline(runs, events), needs)
    return sorted(
        (ScopeTally(scope, limit, peak[scope], users[scope], len(held_back[scope])) for scope, limit in limits.items()),
        key=lambda t: (t.scope != GLOBAL, not t.scope.startswith("queue:"), natural_key(t.scope)),
    )


def _claim_timeline(
    runs: Sequence[RunRecord], events: Mapping[str, Sequence[EventRecord]]
) -> list[tuple[int, str, bool]]:
    """(event id, run id, claimed?) for every claim and release, in id order (see the module's docstring)."""
    timeline: list[tuple[int, str, bool]] = []
    for run in runs:
        for event in events.get(run.id, ()):
            if event.type == CLAIM:
                timeline.append((event.id, run.id, True))
            elif event.type in RELEASES:
                timeline.append((event.id, run.id, False))
    return sorted(timeline)


def _held_back(runs: Sequence[RunRecord], events: Mapping[str, Sequence[EventRecord]]) -> dict[str, set[str]]:
    """Per scope, the runs a claim skipped at least once because that scope was full."""
    held_back: dict[str, set[str]] = defaultdict(set)
    for run in runs:
        for event in events.get(run.id, ()):
            if event.type == BLOCKED:
                for item in event.metadata.get("blocked_by") or ():
                    if isinstance(item, dict) and "scope" in item:
                        held_back[item["scope"]].add(run.id)
    return held_back


def _peak_holders(timeline: Iterable[tuple[int, str, bool]], needs: Mapping[str, Iterable[ScopeNeed]]) -> Counter[str]:
    """Per scope, the most runs that held it at once over the replayed timeline."""
    holding: set[str] = set()
    current: Counter[str] = Counter()
    peak: Counter[str] = Counter()
    for _, run_id, claimed in timeline:
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
    return peak


Holder = tuple[str, str | None]  # (run id, step key)


@dataclass
class _PoolReplay:
    """Slots held per pool while step events are replayed in id order."""

    limits: Mapping[str, int]
    held: dict[Holder, dict[str, int]] = field(default_factory=dict)
    current: Counter[str] = field(default_factory=Counter)
    peak: Counter[str] = field(default_factory=Counter)
    users: dict[str, set[Holder]] = field(default_factory=lambda: defaultdict(set))
    waited: dict[str, set[Holder]] = field(default_factory=lambda: defaultdict(set))

    def apply(self, event: EventRecord) -> None:
        holder = (event.run_id, event.step_key)
        if event.type == SLOT_CLAIM:
            self._claim(holder, event.metadata.get("pools") or {})
        elif event.type == SLOT_RELEASE:
            for pool in event.metadata.get("pools") or {}:
                self.current[pool] -= self.held.get(holder, {}).pop(pool, 0)
        elif event.type == SLOT_WAIT:
            for item in event.metadata.get("blocked_by") or ():
                if isinstance(item, dict) and item.get("pool") in self.limits:
                    self.waited[item["pool"]].add(holder)
        elif event.type in RELEASES:
            self._end_run(event.run_id)

    def _claim(self, holder: Holder, pools: Mapping[str, int]) -> None:
        for pool, slots in pools.items():
            if pool in self.limits and pool not in self.held.setdefault(holder, {}):
                self.held[holder][pool] = slots
                self.users[pool].add(holder)
                self.current[pool] += slots
                self.peak[pool] = max(self.peak[pool], self.current[pool])

    def _end_run(self, run_id: str) -> None:
        """A run's end frees every slot its steps still hold."""
        for key in [key for key in self.held if key[0] == run_id]:
            for pool, slots in self.held.pop(key).items():
                self.current[pool] -= slots


def pool_tally(events: Mapping[str, Iterable[EventRecord]], limits: Mapping[str, int]) -> list[ScopeTally]:
    """Per configured pool: its limit, the most slots held at once, how many steps used it and
    how many of those waited for it at least once."""
    replay = _PoolReplay(limits)
    for event in sorted((event for run_events in events.values() for event in run_events), key=lambda e: e.id):
        replay.apply(event)
    return [
        ScopeTally(f"pool:{pool}", limit, replay.peak[pool], len(replay.users[pool]), len(replay.waited[pool]))
        for pool, limit in sorted(limits.items())
    ]
