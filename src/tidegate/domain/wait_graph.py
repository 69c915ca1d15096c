"""Waits that deadlock across chains: the store-wide complement of `plan_wait`.

`plan_wait` sees one chain, so it cannot see two sibling subtrees that each keep
what the other needs (c1 keeps queue a and waits on a child on queue b; c2 keeps
queue b and waits on a child on queue a). Slots are held for good only by runs
that cannot go on, so the exact question is a least fixed point: a run goes on
when every child it awaits goes on and every scope it must still take has a slot
not kept by a run that cannot go on. Everything else (running runs, runs whose
keepers will end) ends eventually, provided claims are fair and every later wait
is checked the same way. The engine asks it with the new wait already applied
(the parent waiting with its plan, its children queued), under the lock that
serializes waits, over every waiting run, every run queued to resume, and every
queued child a waiting run awaits. Other queued runs keep nothing and await
nothing, so they change no answer; a run missing from the graph is taken to end.
The worklist touches each run, await and needed scope a bounded number of times,
so the cost grows with the waiting runs, not the backlog.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tidegate.domain.errors import WaitCycle, WaitDeadlock


@dataclass(frozen=True)
class Blocked:
    """A run that cannot go on by itself: queued (new, or resuming) or waiting.

    `kept`: slots it holds meanwhile; `needs`: scopes it must still take before it
    runs (again); `awaits`: children that must end first. A child id missing from
    the graph is running and will end.
    """

    run_id: str
    kept: frozenset[str]
    needs: frozenset[str]
    awaits: frozenset[str] = frozenset()


def never_ending(blocked: Sequence[Blocked], limits: Mapping[str, int | None]) -> frozenset[str]:
    """The runs that can never go on: the complement of the least fixed point of "goes on".

    A worklist, so each run, scope and await is looked at a bounded number of times:
    a run goes on once its last awaited child goes on and its needed scopes open; a
    scope opens when enough of its keepers go on.
    """
    progress = _Progress(blocked, limits)
    todo = [run_id for run_id in progress.runs if progress.ready(run_id)]
    while todo:
        run_id = todo.pop()
        if progress.ready(run_id):
            todo.extend(progress.goes_on_now(run_id))
    return frozenset(progress.runs) - progress.goes_on


class _Progress:
    """Who awaits whom, who needs and keeps each scope, and the runs known to go on."""

    def __init__(self, blocked: Sequence[Blocked], limits: Mapping[str, int | None]) -> None:
        self.runs = {run.run_id: run for run in blocked}
        self.limits = limits
        self.pending = {run.run_id: len(run.awaits & self.runs.keys()) for run in blocked}
        self.awaited_by: dict[str, list[str]] = {}
        self.needing: dict[str, list[str]] = {}
        for run in blocked:
            for child in run.awaits & self.runs.keys():
                self.awaited_by.setdefault(child, []).append(run.run_id)
            for scope in run.needs:
                self.needing.setdefault(scope, []).append(run.run_id)
        self.stuck_keepers = Counter(scope for run in blocked for scope in run.kept)
        self.goes_on: set[str] = set()

    def ready(self, run_id: str) -> bool:
        return (
            run_id not in self.goes_on and not self.pending[run_id] and not any(map(self.full, self.runs[run_id].needs))
        )

    def full(self, scope: str) -> bool:
        return _is_full(self.limits.get(scope), self.stuck_keepers[scope])

    def goes_on_now(self, run_id: str) -> list[str]:
        """Record that the run goes on; return the runs that may now go on too."""
        self.goes_on.add(run_id)
        again: list[str] = []
        for scope in self.runs[run_id].kept:
            was_full = self.full(scope)
            self.stuck_keepers[scope] -= 1
            if was_full and not self.full(scope):
                again.extend(self.needing.get(scope, ()))
        for parent in self.awaited_by.get(run_id, ()):
            self.pending[parent] -= 1
            again.append(parent)
        return again


def refuse_stuck_wait(parent_id: str, blocked: Sequence[Blocked], limits: Mapping[str, int | None]) -> None:
    """Raise WaitDeadlock when the parent, its wait applied in `blocked`, could never end
    (WaitCycle when it awaits, through runs that await, a run that awaits it).

    The error names the scope where the parent's awaits first block, its stuck
    keepers, and the runs around the cycle from the parent.
    """
    stuck = never_ending(blocked, limits)
    if parent_id not in stuck:
        return
    runs = {run.run_id: run for run in blocked}
    keepers: dict[str, list[str]] = {}
    for run in blocked:
        for scope in run.kept if run.run_id in stuck else ():
            keepers.setdefault(scope, []).append(run.run_id)
    cycle: list[str] = []
    blocking: list[tuple[str, int, tuple[str, ...]]] = []
    run_id = parent_id
    while run_id not in cycle:
        cycle.append(run_id)
        child = next((c for c in sorted(runs[run_id].awaits) if c in stuck), None)
        if child is None:
            blocking.append(_blocking_scope(runs[run_id], keepers, limits))
            holders = blocking[-1][2]
            child = next((h for h in holders if h not in cycle), holders[0])
        run_id = child
    if not blocking:  # a circle of awaits alone (a unique child linked to a run waiting on its parent)
        raise WaitCycle((*cycle, run_id))
    scope, limit, holders = blocking[0]
    raise WaitDeadlock(scope, tuple(cycle), limit, holders)


def _blocking_scope(
    run: Blocked, keepers: Mapping[str, list[str]], limits: Mapping[str, int | None]
) -> tuple[str, int, tuple[str, ...]]:
    """The first scope a stuck run with no stuck child needs that stuck keepers fill (it has one)."""
    scope = next(s for s in sorted(run.needs) if _is_full(limits.get(s), len(keepers.get(s, ()))))
    limit = limits[scope]
    assert limit is not None  # an unlimited scope is never full
    return scope, limit, tuple(sorted(keepers[scope]))


def _is_full(limit: int | None, stuck_keepers: int) -> bool:
    # A limit of 0 with no stuck keeper is an operator's pause, not a deadlock.
    return limit is not None and stuck_keepers > 0 and stuck_keepers >= limit
