"""The claim plan: everything a claim decides before it reads a run, decided once, from the rules.

A claim's decision is `domain.admission.admit`; what comes before it (which
queues to read, how much of each, whether the claim can be one statement,
which claim turns and scope locks it takes and in what order, whether it
needs this worker's own counts, and which full scopes prove that claiming is
futile) is the plan. Every path reads it and none re-derives it: both
adapters' claims, the one-statement claim (storage/postgres/free_claims.py),
the look (`peek_cycle`, storage/*/look.py) and the forecast of the scopes a
claim locks ahead (storage/postgres/claim_scopes.py). The worker's latch
(worker/latch.py) rests on the claim's `more`, which is `ClaimPlan.nothing_more`.

Each shortcut rests on a property of the plan, pinned to `admit` by
tests/unit/test_domain_claim_plan.py:

- `free`: `admit` takes the first runs in claim order and blocks none, so the
  claim may be one statement that does just that;
- `closures`: a queue said closed is one of whose runs `admit` admits none,
  read or not, so the look may answer "nothing" and a short claim may skip
  claiming again; a queue closed by a full scope is blocked by that very
  scope in `domain.blocking.verdict` (what every surface shows), for every
  run the closure covers;
- the lock order: claim turns in queue-name order, then scope rows in key
  order (`take_claim_turns`, `lock_steps`), the one order every claimer keeps.

Only proofs that hold for every queued run of a queue close it: its pause, a
full global cap (every run needs `global`), no queued run at all (when the
caller read that), this worker's `max_workers`, or the full shared limit of
a queue that is not partitioned when no queued run of it carries an explicit
concurrency key (such a run has a scope of its own, `queue:NAME/key=...`).
Partitioned queue limits, tag limits, tag rates and per-partition local limits
never close a queue: a run not read may fall in a partition, or carry tags, with room.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property

from tidegate.domain.admission import Admission, LocalUsage
from tidegate.domain.ahead import waits_ahead
from tidegate.domain.blocking import Check
from tidegate.domain.scopes import GLOBAL, TAG_RATE_PREFIX, Rules, queue_scope

WINDOW_MARGIN = 32  # at most this many rows read past the claim limit where limits apply
MIN_MARGIN = 8  # at least this many, so that a claim of one still sees (and explains) the runs behind it
QUEUE_PREFIX = "queue:"

PAUSED = "paused"  # closed by its pause
FULL = "full"  # closed by full scopes every run of it needs (`Closed.checks`)
EMPTY = "empty"  # no queued run at all
WORKER_CAP = "max_workers"  # this worker runs max_workers runs of it


@dataclass(frozen=True)
class QueuePlan:
    """What the rules say of one open queue before any of its runs is read."""

    name: str
    limited: bool  # some run-level limit (or a per-worker cap) can hold back a run of it
    fair: bool  # partitions take turns: the claim needs their running counts (lane_load)
    local_counts: bool  # a per-worker cap applies: the claim needs this worker's own counts
    binds_all: bool  # one shared queue limit binds every run of it that has no concurrency key
    ahead: bool = True  # `admit` may take runs of it ahead of the worker's free slots (`ahead.waits_ahead`)
    # The most runs of it one claim can take ahead: under one shared limit L that binds them all, half
    # the room a claim of one free slot or more leaves, (L - 1) // 2 (`ahead.WorkerRoom`); None: no bound.
    most_ahead: int | None = None

    @property
    def claim_turn(self) -> bool:
        """Claimed by one claimer at a time (a claim turn): a limited or fair queue."""
        return self.limited or self.fair

    def window(self, claim_limit: int, margin: bool = True) -> int:
        """How many rows of the queue's head one claim reads first.

        Every row read is decided on (its scopes, its block reason), so reading
        more than can matter costs throughput. Where no limit applies nothing
        can be skipped: the claim limit. Where one does, up to twice it
        (between MIN_MARGIN and WINDOW_MARGIN more), so that a few blocked runs
        at the head do not leave the claim short and get their block reasons;
        a head that is all blocked is stepped over by a second read. `margin`
        False (the last claim of these queues held nothing back and left every
        scope room for this one: `storage.shared.claiming.room_after`) reads the claim
        limit."""
        if not (margin and self.limited):
            return claim_limit
        return claim_limit + min(WINDOW_MARGIN, max(MIN_MARGIN, claim_limit))


@dataclass(frozen=True)
class Closed:
    """Why no queued run of `queue` can be admitted now: `cause` is PAUSED, FULL, EMPTY or
    WORKER_CAP; for FULL, `checks` are the full scopes that bind every run it covers, as
    `domain.blocking.verdict` words them (scope, used, limit), in key order."""

    queue: str
    cause: str
    checks: tuple[Check, ...] = ()


@dataclass(frozen=True)
class ClaimPlan:
    """A claim of `queues` (the worker's, in its order) under `rules`, decided before SQL."""

    rules: Rules
    queues: tuple[str, ...]  # as asked, paused ones included
    open: tuple[QueuePlan, ...]  # the queues a claim reads, in the same order

    @cached_property
    def open_names(self) -> list[str]:
        return [queue.name for queue in self.open]

    @cached_property
    def free(self) -> bool:
        """No limit, per-worker cap or fair ordering applies to any open queue (and one is open):
        `admit` would take the first runs in claim order, so the claim may be one statement."""
        return bool(self.open) and not any(queue.claim_turn for queue in self.open)

    @cached_property
    def takes_ahead(self) -> bool:
        """Some open queue's runs may be taken ahead of the worker's free slots: otherwise a claim
        is sized, and reads, as if none were asked for (`storage.shared.claiming.admit_sizes`)."""
        return any(queue.ahead for queue in self.open)

    @cached_property
    def most_ahead(self) -> int | None:
        """The most runs a claim can take ahead, whatever the usage: a claim under a binding queue
        limit reads no rows for runs `admit` could never take (None: no bound)."""
        bounds = [queue.most_ahead for queue in self.open if queue.ahead]
        return None if None in bounds else sum(bound for bound in bounds if bound is not None)

    @cached_property
    def limited(self) -> bool:
        """Some open queue is limited: the claim locks the scopes its candidates need."""
        return any(queue.limited for queue in self.open)

    @cached_property
    def local_counts(self) -> bool:
        """The claim reads this worker's own running counts (a suspect among the candidates
        asks for them too: its group)."""
        return any(queue.local_counts for queue in self.open)

    @cached_property
    def fair_lanes(self) -> list[str]:
        """The open fair queues: their claims need per-partition running counts (lane_load)."""
        return [queue.name for queue in self.open if queue.fair]

    @cached_property
    def claim_turns(self) -> list[str]:
        """The queues whose claim turn the claim takes, in the order it takes them (name order)."""
        return sorted(queue.name for queue in self.open if queue.claim_turn)

    @cached_property
    def probed(self) -> list[str]:
        """The open queues a full shared limit could close, if none of their runs has a key."""
        return [queue.name for queue in self.open if queue.binds_all]

    @cached_property
    def closing_scopes(self) -> list[str] | None:
        """The scopes whose usage could prove every open queue closed, in key order; None when
        some open queue has none (nothing can be proven then without reading its runs).
        `max_workers` is left out: it needs this worker's own counts, which a claim reads."""
        keys: set[str] = set()
        for queue in self.open:
            own = self._rule_keys(queue)
            if not own:
                return None
            keys.update(own)
        return sorted(keys)

    def queue(self, name: str) -> QueuePlan | None:
        return next((queue for queue in self.open if queue.name == name), None)

    def ahead_keys(self, claim_turns: Collection[str]) -> list[str]:
        """The scope keys the rules name before any run is read, for a claim that holds `claim_turns`:
        `global`, and the shared key of each queue whose turn it holds and whose one limit binds
        every run (only a claimer holding a queue's turn locks its key: see `lock_steps`)."""
        keys = {key for queue in self.open for key in self._rule_keys(queue) if own_queue(key) in (None, *claim_turns)}
        return sorted(keys)

    def needed_keys(self, shapes: Iterable[tuple[str, str, Mapping[str, str]]]) -> list[str]:
        """Every scope runs of these (queue, partition, tags) shapes need, in key order (the
        order they are locked in); none when no open queue is limited."""
        if not self.limited:
            return []
        return sorted(
            {need.key for queue, partition, tags in shapes for need in self.rules.scopes_for(queue, partition, tags)}
        )

    def closures(
        self,
        usage: Mapping[str, int],
        running: Mapping[str, int],
        unkeyed: Collection[str] = (),
        empty: Collection[str] = (),
    ) -> dict[str, Closed]:
        """The queues of the plan that no queued run of can be admitted, and why, given the slots
        in use per scope (`usage`), the runs this worker runs per queue (`running`), the queues
        known to hold no queued run with a concurrency key (`unkeyed`) and those known to hold no
        queued run (`empty`)."""
        rules = self.rules
        closed: dict[str, Closed] = {}
        plans = {queue.name: queue for queue in self.open}
        global_check = Check(GLOBAL, usage.get(GLOBAL, 0), rules.global_limit() or 0)
        global_full = rules.global_limit() is not None and not global_check.ok
        for name in self.queues:
            queue = plans.get(name)
            if queue is None:
                closed[name] = Closed(name, PAUSED)
                continue
            checks = [global_check] if global_full else []
            if name in unkeyed and queue.binds_all:
                scope = queue_scope(name, "")
                own = Check(scope, usage.get(scope, 0), rules.queue_limit(name, "") or 0)
                if not own.ok:
                    checks.append(own)
            max_workers = rules.max_workers(name)
            if checks:
                closed[name] = Closed(name, FULL, tuple(checks))
            elif name in empty:
                closed[name] = Closed(name, EMPTY)
            elif max_workers is not None and running.get(name, 0) >= max_workers:
                closed[name] = Closed(name, WORKER_CAP)
        return closed

    def all_closed(
        self,
        usage: Mapping[str, int],
        running: Mapping[str, int],
        unkeyed: Collection[str] = (),
        empty: Collection[str] = (),
    ) -> bool:
        """Whether no queued run of any queue of the plan can be admitted (`closures`)."""
        return len(self.closures(usage, running, unkeyed, empty)) == len(self.queues)

    def nothing_more(self, usage: Mapping[str, int], local: LocalUsage, decision: Admission) -> bool:
        """After a claim admitted `decision.admitted` on `usage` (slots in use before it, read under
        the claim's locks), whether claiming again at once is sure to admit nothing.

        The runs past the window were not read, so whether they carry a concurrency
        key is unknown: a full shared queue limit proves nothing here (a woken
        worker's look reads that, and stops there). A queue whose one rate budget (no rate
        partition) held a run back is closed too: its next start waits for a time, not a claim
        (`Admission.next_allowed_at`)."""
        after = dict(usage)
        running = dict(local.per_queue)
        for candidate, needs in decision.admitted:
            for need in needs:
                after[need.key] = after.get(need.key, 0) + 1
            running[candidate.queue] = running.get(candidate.queue, 0) + 1
        rated = {
            saturation.scope.removeprefix("rate:")
            for saturations in decision.blocked.values()
            for saturation in saturations
            if saturation.per is not None
            and not saturation.scope.startswith(TAG_RATE_PREFIX)  # a tag's rate holds some runs only
            and "/" not in saturation.scope.removeprefix("rate:")
        }
        return self.all_closed(after, running, empty=rated)

    def take_claim_turns(self, held: Collection[str], scopes_locked: bool) -> list[str] | None:
        """The claim turns still to take, in the order to take them, for a claim holding `held`
        claim turns; None when taking them would break the lock order (a turn after scope rows, or
        after a greater queue's turn: the rules changed mid-claim): take nothing then."""
        needed = [queue for queue in self.claim_turns if queue not in held]
        if needed and (scopes_locked or (held and needed[0] < max(held))):
            return None
        return needed

    def _rule_keys(self, queue: QueuePlan) -> list[str]:
        """The scopes every run of `queue` needs (its runs without a concurrency key, for its own)."""
        own = [GLOBAL] if self.rules.global_limit() is not None else []
        if queue.binds_all:
            own.append(queue_scope(queue.name, ""))
        return own


def plan(queues: Sequence[str], rules: Rules) -> ClaimPlan:
    """The plan of a claim of `queues` under `rules`.

    The last plan made is given again for the same rules object and queues: a store re-reads its
    rules only when their version moves (the same object until then), so a worker's cycles make
    (and fill the cached answers of) one plan per rules version, not one per cycle. A plan holds
    its rules, so the object compared by identity cannot be another one at the same address."""
    asked = tuple(queues)
    last = _last_plan
    if last is not None and last.rules is rules and last.queues == asked:
        return last
    made = ClaimPlan(rules, asked, tuple(_queue_plan(queue, rules) for queue in asked if not rules.is_paused(queue)))
    _remember(made)
    return made


_last_plan: ClaimPlan | None = None


def _remember(made: ClaimPlan) -> None:
    global _last_plan
    _last_plan = made  # one reference swapped whole: a thread reads the old plan or the new one


def _queue_plan(queue: str, rules: Rules) -> QueuePlan:
    config = rules.queues.get(queue)
    local_counts = rules.local_limit(queue) is not None or rules.max_workers(queue) is not None
    limited = bool(
        rules.global_limit() is not None
        or rules.has_rates(queue)  # every claim charges a rate: never free, one claimer at a time (a turn)
        or rules.run_queue.tag_concurrency_limits
        or rules.overrides
        or local_counts
        or (config is not None and config.concurrency.global_limit is not None)
    )
    partitioned = config is not None and config.concurrency.partition.enabled
    shared = None if partitioned else rules.queue_limit(queue, "")
    return QueuePlan(
        name=queue,
        limited=limited,
        fair=config is not None and config.ordering == "fair",
        local_counts=local_counts,
        binds_all=shared is not None,
        ahead=waits_ahead(rules, queue),
        most_ahead=None if shared is None else max(0, (shared - 1) // 2),
    )


def own_queue(key: str) -> str | None:
    """The queue a queue scope belongs to (a queue name holds no '/'); None for a shared scope."""
    if not key.startswith(QUEUE_PREFIX):
        return None
    return key[len(QUEUE_PREFIX) :].partition("/")[0]


def lock_steps(
    keys: Iterable[str], locked: Collection[str], claim_turns: Collection[str]
) -> tuple[list[str], list[str]]:
    """The scope keys of `keys` not locked yet, in key order, split by how a claim that holds
    `locked` scope rows and the claim turns `claim_turns` may take them: those it may wait for, and those
    it may only try (never wait for).

    Scope rows are locked in key order, the one order every claimer keeps, so
    that no two claimers wait on each other in a circle. A key below a shared
    key already held would break it, except a queue's own key
    (`queue:NAME[/PARTITION]`) whose turn the claim holds: only a claimer
    holding that queue's turn ever locks one, so nobody can hold it while
    waiting for this claimer. Any other key below one held may only be tried."""
    top = max((key for key in locked if own_queue(key) is None), default=None)
    wait: list[str] = []
    tried: list[str] = []
    for key in sorted(set(keys) - set(locked)):
        may_wait = top is None or key > top or own_queue(key) in claim_turns
        (wait if may_wait else tried).append(key)
    return wait, tried
