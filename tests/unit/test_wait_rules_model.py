"""`plan_wait` and `refuse_stuck_wait` against a reference model: a simulator of whole trees.

The model knows nothing of chains, counting or fixed points. Runs occupy every
slot of their scopes while running; a waiting run holds only what its plan kept;
a queued run (new, or a parent whose children all ended, resuming) is admitted
when every scope it must still take has room; the next event is picked at random
among those possible. A refused wait fails its parent (the trigger raised) and
its children never exist. The tree is stuck when runs remain and no event is
possible (with or without the kept slots freed while a parent is queued to
resume: both engines are checked). Only the issue's release rules are restated (`issue_plan`): the bound
on releases is a policy, not something a simulation can discover.

What is checked, over random trees of queues, tags, limits and waits (one after
another, or batches):
- accepted waits plan exactly the issue's release rules;
- RecursiveWaitDeadlock is raised exactly where the issue's bound says, and at
  limit 1 it is a real deadlock (the parent keeping its slot instead: stuck);
- every WaitDeadlock is real: accept that wait anyway (in a copy of the world)
  and the children it names are never admitted, so no tree that could finish
  is refused;
- with one waiting child per batch (one chain at a time), every tree whose waits
  `plan_wait` accepts finishes: it misses no deadlock;
- with sibling subtrees waiting side by side, `plan_wait` alone leaves only
  cycles across chains stuck, and with `refuse_stuck_wait` every tree finishes.
"""

from __future__ import annotations

import copy
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tidegate.domain.errors import RecursiveWaitDeadlock, WaitDeadlock
from tidegate.domain.wait_graph import Blocked, refuse_stuck_wait
from tidegate.domain.waits import Slot, Waiter, WaitPlan, plan_wait

SCOPES = ("global", "queue:a", "queue:b", "queue:c", "tag:t", "tag:u")


@dataclass(frozen=True)
class Node:
    id: str
    scopes: tuple[str, ...]
    release_all: bool
    waits: tuple[tuple[Node, ...], ...]  # batches waited on one after the other


@dataclass
class Run:
    node: Node
    parent: str | None
    status: str = "queued"  # queued, running, waiting, done, failed
    holding: frozenset[str] = frozenset()
    plan: WaitPlan | None = None
    next_wait: int = 0
    admitted: bool = False


@dataclass
class World:
    limits: dict[str, int | None]
    runs: dict[str, Run] = field(default_factory=dict)
    resume_frees_kept: bool = False  # the engine may free kept slots when a parent is queued to resume

    def slots(self, node: Node) -> list[Slot]:
        return [Slot(scope, self.limits[scope]) for scope in node.scopes]

    def occupancy(self) -> Counter[str]:
        return Counter(scope for run in self.runs.values() for scope in run.holding)

    def to_take(self, run: Run) -> frozenset[str]:
        return frozenset(run.node.scopes) - run.holding

    def has_room(self, run: Run) -> bool:
        used = self.occupancy()
        return all(self.limits[s] is None or used[s] < self.limits[s] for s in self.to_take(run))

    def ancestors(self, run: Run) -> list[Run]:
        chain = []
        while run.parent is not None:
            run = self.runs[run.parent]
            chain.append(run)
        return chain[::-1]


Decide = Callable[[World, Run, tuple[Node, ...]], WaitPlan]


def sut(world: World, run: Run, batch: tuple[Node, ...]) -> WaitPlan:
    waiters = [Waiter(a.node.id, a.plan.kept, a.plan.released) for a in world.ancestors(run) if a.plan]
    children = [world.slots(child) for child in batch]
    return plan_wait(run.node.id, world.slots(run.node), children, waiters, release_all=run.node.release_all)


def issue_plan(world: World, run: Run, batch: tuple[Node, ...], keep_past_bound: bool = False) -> WaitPlan | str:
    """The issue's release rules, restated without any deadlock check; a scope name = the bound refuses
    (or, with `keep_past_bound`, that slot is kept instead: what would happen with no bound to refuse)."""
    needed = {scope for child in batch for scope in child.scopes}
    lent = Counter(scope for a in world.ancestors(run) if a.plan for scope in a.plan.released)
    released, kept = set(), set()
    for scope in run.node.scopes:
        limit = world.limits[scope]
        wanted = scope == "global" or scope in needed or run.node.release_all
        if wanted and (scope == "global" or limit is None or lent[scope] < limit):
            released.add(scope)
        elif wanted and scope in needed and not keep_past_bound:
            return scope
        else:
            kept.add(scope)
    return WaitPlan(frozenset(released), frozenset(kept))


def end(world: World, run: Run, status: str) -> None:
    run.status, run.holding = status, frozenset()
    if run.parent is not None:
        parent = world.runs[run.parent]
        batch = parent.node.waits[parent.next_wait - 1]
        if all(world.runs[child.id].status in ("done", "failed") for child in batch):
            parent.status = "queued"
            parent.holding = frozenset() if world.resume_frees_kept else parent.holding


def accept(world: World, run: Run, batch: tuple[Node, ...], plan: WaitPlan) -> None:
    run.status, run.plan, run.holding = "waiting", plan, plan.kept
    run.next_wait += 1
    for child in batch:
        world.runs[child.id] = Run(child, run.node.id)


def possible(world: World) -> list[Run]:
    return [r for r in world.runs.values() if r.status == "running" or (r.status == "queued" and world.has_room(r))]


def step(
    world: World, run: Run, decide: Decide, on_refusal: Callable[[Run, tuple[Node, ...], Exception], None]
) -> None:
    if run.status == "queued":
        run.status, run.holding, run.admitted = "running", frozenset(run.node.scopes), True
        used = world.occupancy()
        assert all(world.limits[s] is None or used[s] <= world.limits[s] for s in SCOPES)
    elif run.next_wait < len(run.node.waits):
        batch = run.node.waits[run.next_wait]
        try:
            plan = decide(world, run, batch)
        except (RecursiveWaitDeadlock, WaitDeadlock) as refused:
            on_refusal(run, batch, refused)
            end(world, run, "failed")
            return
        accept(world, run, batch, plan)
    else:
        end(world, run, "done")


def settle(
    world: World, rng: random.Random, decide: Decide = sut, on_refusal: Callable[..., None] | None = None
) -> None:
    """Run events at random until none is possible."""
    while todo := possible(world):
        step(world, rng.choice(todo), decide, on_refusal or (lambda *_: None))


def stuck(world: World) -> list[Run]:
    return [r for r in world.runs.values() if r.status not in ("done", "failed")]


def never_admits(world: World, rng: random.Random, children: list[Node]) -> bool:
    """Whether, from here, refusing only what the issue's bound refuses, none of `children` ever starts."""
    settle(world, rng, decide=bound_only)
    return not any(world.runs[child.id].admitted for child in children)


def bound_only(world: World, run: Run, batch: tuple[Node, ...]) -> WaitPlan:
    plan = issue_plan(world, run, batch)
    if isinstance(plan, str):
        raise RecursiveWaitDeadlock(plan, (), 0)
    return plan


def _forced(plan: WaitPlan | str) -> WaitPlan:
    assert isinstance(plan, WaitPlan), plan
    return plan


def check_refusal(world: World, rng: random.Random, run: Run, batch: tuple[Node, ...], refused: Exception) -> None:
    """A refused wait, accepted anyway in a copy of the world, hangs (or is the issue's bound)."""
    expected = issue_plan(world, run, batch)
    if isinstance(refused, RecursiveWaitDeadlock):
        assert expected == refused.scope
        event(f"recursive bound, limit {refused.limit}")
        if refused.limit != 1:
            return  # the reference's bound, conservative past limit 1 (domain/waits.py)
        plan = _forced(issue_plan(world, run, batch, keep_past_bound=True))
    else:
        assert isinstance(refused, WaitDeadlock) and isinstance(expected, WaitPlan)
        own = {a.node.id for a in world.ancestors(run)}
        event("wait deadlock in the chain" if own.issuperset(refused.holders) else "wait deadlock across chains")
        plan = expected
    fork = copy.deepcopy(world)
    accept(fork, fork.runs[run.node.id], batch, plan)
    blocked = [child for child in batch if refused.scope in child.scopes]
    assert blocked and never_admits(fork, rng, blocked), f"refused a wait that could finish: {refused}"


def assert_chain_deadlocks_caught(world: World) -> None:
    """At a stuck state, every blocked run must be blocked by a keeper outside its own chain."""
    used = world.occupancy()
    for run in stuck(world):
        if run.status != "queued":
            continue
        own = {a.node.id for a in world.ancestors(run)} | {run.node.id}
        for scope in world.to_take(run):
            limit = world.limits[scope]
            if limit is not None and used[scope] >= limit:
                keepers = {r.node.id for r in world.runs.values() if scope in r.holding}
                assert keepers - own, f"{run.node.id} blocked on {scope} by its own chain {sorted(keepers)}"


@st.composite
def trees(draw: st.DrawFn, one_chain: bool) -> tuple[dict[str, int | None], Node]:
    """A root and its waits, depth <= 3; `one_chain`: at most one waiting child per batch."""
    queues = st.sampled_from(["queue:a", "queue:b", "queue:c"])
    tags = st.sets(st.sampled_from(["tag:t", "tag:u"]))
    limits = {scope: draw(st.sampled_from([None, 1, 1, 2, 3])) for scope in SCOPES}
    ids = iter(f"r{i}" for i in range(1000))

    def node(depth: int) -> Node:
        run_id, scopes = next(ids), ("global", draw(queues), *draw(tags))
        waits: list[tuple[Node, ...]] = []
        for _ in range(draw(st.integers(0, 2)) if depth < 3 else 0):
            inner = draw(st.integers(0, 1 if one_chain else 2))
            leaves = draw(st.integers(0 if inner else 1, 2))
            waits.append((*(node(depth + 1) for _ in range(inner)), *(leaf() for _ in range(leaves))))
        return Node(run_id, scopes, draw(st.booleans()), tuple(waits))

    def leaf() -> Node:
        return Node(next(ids), ("global", draw(queues), *draw(tags)), False, ())

    return limits, node(0)


@st.composite
def crossings(draw: st.DrawFn) -> tuple[dict[str, int | None], Node]:
    """Sibling subtrees waiting side by side on two small queues: where cycles across chains form."""
    limits: dict[str, int | None] = dict.fromkeys(SCOPES)
    limits.update({scope: draw(st.sampled_from([1, 1, 2])) for scope in ("queue:a", "queue:b", "tag:t")})
    ids = iter(f"r{i}" for i in range(1000))

    def run(queue: str, waits: tuple[tuple[Node, ...], ...] = ()) -> Node:
        return Node(next(ids), ("global", queue, *draw(st.sets(st.just("tag:t")))), False, waits)

    def sibling(queue: str) -> Node:
        leaves = tuple(run(draw(st.sampled_from(["queue:a", "queue:b"]))) for _ in range(draw(st.integers(1, 2))))
        return run(queue, (leaves,))

    siblings = tuple(sibling(("queue:a", "queue:b")[i % 2]) for i in range(draw(st.integers(2, 3))))
    return limits, Node("root", ("global", "queue:c"), False, (siblings,))


def whole_graph(world: World, run: Run, batch: tuple[Node, ...]) -> WaitPlan:
    """plan_wait, then the store-wide check over every blocked run, the new wait applied."""
    plan = sut(world, run, batch)
    blocked = [
        Blocked(r.node.id, r.holding, frozenset(r.node.scopes) - r.holding, awaited(world, r))
        for r in world.runs.values()
        if r.status in ("queued", "waiting")
    ]
    blocked.append(Blocked(run.node.id, plan.kept, plan.released, frozenset(child.id for child in batch)))
    blocked.extend(Blocked(child.id, frozenset(), frozenset(child.scopes)) for child in batch)
    refuse_stuck_wait(run.node.id, blocked, world.limits)
    return plan


def awaited(world: World, run: Run) -> frozenset[str]:
    if run.status != "waiting":
        return frozenset()
    batch = run.node.waits[run.next_wait - 1]
    return frozenset(c.id for c in batch if world.runs[c.id].status not in ("done", "failed"))


def run_tree(limits: dict[str, int | None], root: Node, rng: random.Random, decide: Decide = sut) -> World:
    world = World(limits, {root.id: Run(root, None)}, resume_frees_kept=rng.random() < 0.5)

    def on_refusal(run: Run, batch: tuple[Node, ...], refused: Exception) -> None:
        check_refusal(world, random.Random(rng.random()), run, batch, refused)

    def checked(w: World, run: Run, batch: tuple[Node, ...]) -> WaitPlan:
        plan = decide(w, run, batch)
        assert plan == issue_plan(w, run, batch)
        return plan

    settle(world, rng, decide=checked, on_refusal=on_refusal)
    return world


FAST = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(trees(one_chain=True), st.randoms(use_true_random=False))
def test_one_chain_at_a_time_finishes_exactly_when_plan_wait_accepts(tree, rng):
    limits, root = tree
    world = run_tree(limits, root, rng)
    assert not stuck(world), f"stuck: {[(r.node.id, r.status) for r in stuck(world)]}"
    event("refused" if any(r.status == "failed" for r in world.runs.values()) else "finished")


@FAST
@given(st.one_of(trees(one_chain=False), crossings()), st.randoms(use_true_random=False))
def test_any_tree_never_refuses_a_completable_wait_nor_lets_a_chain_deadlock_through(tree, rng):
    limits, root = tree
    world = run_tree(limits, root, rng)
    if stuck(world):
        event("stuck across chains")
        assert_chain_deadlocks_caught(world)


@FAST
@given(st.one_of(trees(one_chain=False), crossings()), st.randoms(use_true_random=False))
def test_with_the_whole_graph_any_tree_finishes_exactly_when_its_waits_are_accepted(tree, rng):
    limits, root = tree
    world = run_tree(limits, root, rng, decide=whole_graph)
    assert not stuck(world), f"stuck: {[(r.node.id, r.status) for r in stuck(world)]}"
