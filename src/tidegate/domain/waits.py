"""Which slots a waiting parent gives up, and which waits could never end.

A parent that waits on children holds no worker, but it may still hold slots of
its run-level scopes (`domain/scopes.py`: `global`, `queue:NAME[/PARTITION]`,
`tag:KEY=VALUE`). Holding them all would starve the system (at `global` limit 1
the child could never start); releasing them all would let other runs of the
parent's queue overtake it while it waits. So, as in the reference:

- `global` is always released: a waiting run does no work, and the environment
  cap is about work. It is never bounded: any depth of waits may release it.
- A queue, partition or tag slot is released when some child needs that same
  scope (else the child would wait on its own parent), and kept otherwise (the
  scope still counts the parent, so its other runs keep waiting their turn).
- A chain of waits may release at most `limit` slots of one scope: the wait that
  would release one more raises `RecursiveWaitDeadlock`. This is the reference's
  bound, kept exactly, and it is a policy rather than a slot deadlock: with every
  level releasing, a same-queue chain of any depth could run one level at a time.
  Where it matters: at limit 1 it is exact (the refused parent would otherwise
  have to keep its slot, and its child on the same scope could never start); at
  limit L >= 2 a chain deeper than L is refused although it could finish.
- `release_all` (tidegate's `release="all"`) releases every slot. Releases a
  child needs stay bounded as above (the reference's situation); a slot no child
  needs that the bound will not let go is kept instead: refusing the whole wait
  for a release nobody asked for would refuse a chain that can finish.

Beyond the reference, a child needing a scope whose whole limit its waiting
ancestors keep raises `WaitDeadlock`. Those keepers resume only after the child
ends, so the child could never start: a refusal never hits a chain that could
finish. Conversely, when the ancestors leave a slot, the other holders are runs
outside the chain, which end unless they are themselves stuck in a cycle of
waits across chains (two sibling subtrees each keeping what the other needs):
that cycle is `domain/wait_graph.py`'s, over the store's blocked runs.

Only the chain is walked (ancestors + parent + children's slots), so the check
costs O(depth x scopes) and the engine can run it inside the trigger's
transaction, against the chain as the store records it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from tidegate.domain.errors import InvalidArgument, RecursiveWaitDeadlock, WaitDeadlock
from tidegate.domain.scopes import GLOBAL


@dataclass(frozen=True)
class Slot:
    """A run-level scope a run occupies while running; `limit` None = unlimited."""

    scope: str
    limit: int | None


@dataclass(frozen=True)
class Waiter:
    """A waiting ancestor as the store records it: the scopes it kept and released.

    `plan_wait` takes ancestors root first, the parent's own parent last, so the
    chain in an error reads in trigger order.
    """

    run_id: str
    kept: frozenset[str]
    released: frozenset[str]


@dataclass(frozen=True)
class WaitPlan:
    """What the waiting parent releases (taken again before it resumes) and keeps."""

    released: frozenset[str]
    kept: frozenset[str]


def plan_wait(
    parent_id: str,
    parent_slots: Sequence[Slot],
    children: Sequence[Sequence[Slot]],
    ancestors: Sequence[Waiter],
    release_all: bool = False,
) -> WaitPlan:
    """Plan the parent's wait on `children` (each child's slots), or refuse it.

    `ancestors` are the waiting runs above the parent, root first. Raises
    `RecursiveWaitDeadlock` or `WaitDeadlock` (see the module docstring);
    `InvalidArgument` on a malformed chain.
    """
    _check_chain(parent_id, parent_slots, ancestors)
    chain = (*(waiter.run_id for waiter in ancestors), parent_id)
    needed = _limits(slot for child in children for slot in child)
    released_before = Counter(scope for waiter in ancestors for scope in waiter.released)
    released: set[str] = set()
    kept: set[str] = set()
    for slot in parent_slots:
        limit = _tightest(slot.limit, needed.get(slot.scope))
        if slot.scope == GLOBAL:
            released.add(slot.scope)
        elif slot.scope not in needed and not release_all:
            kept.add(slot.scope)
        elif limit is None or released_before[slot.scope] < limit:
            released.add(slot.scope)
        elif slot.scope in needed:
            raise RecursiveWaitDeadlock(slot.scope, chain, limit)
        else:
            kept.add(slot.scope)
    _refuse_kept_by_chain(chain, needed, ancestors)
    return WaitPlan(released=frozenset(released), kept=frozenset(kept))


def _refuse_kept_by_chain(chain: tuple[str, ...], needed: dict[str, int | None], ancestors: Sequence[Waiter]) -> None:
    """Raise WaitDeadlock when the ancestors keep the whole limit of a scope a child needs.

    The parent itself is no keeper here: it keeps only scopes no child needs.
    """
    for scope, limit in sorted(needed.items()):
        if limit is None:
            continue
        holders = tuple(waiter.run_id for waiter in ancestors if scope in waiter.kept)
        # A limit of 0 with no keeper is an operator's pause, not this chain's doing.
        if holders and len(holders) >= limit:
            raise WaitDeadlock(scope, chain, limit, holders)


def _limits(slots: Iterable[Slot]) -> dict[str, int | None]:
    """Scope -> tightest limit stated for it (slots read at different times may disagree)."""
    limits: dict[str, int | None] = {}
    for slot in slots:
        limits[slot.scope] = _tightest(limits[slot.scope], slot.limit) if slot.scope in limits else slot.limit
    return limits


def _tightest(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    if b is None:
        return a
    return min(a, b)


def _check_chain(parent_id: str, parent_slots: Sequence[Slot], ancestors: Sequence[Waiter]) -> None:
    scopes = [slot.scope for slot in parent_slots]
    if len(set(scopes)) != len(scopes):
        raise InvalidArgument(f"run {parent_id} lists a scope twice in its slots: {sorted(scopes)}")
    ids = [waiter.run_id for waiter in ancestors]
    if parent_id in ids or len(set(ids)) != len(ids):
        raise InvalidArgument(f"the waiting chain of run {parent_id} repeats a run: {' -> '.join([*ids, parent_id])}")
