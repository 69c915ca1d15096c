"""The claim decision: which candidate runs a worker may start now.

`admit` is pure: the store hands it candidates (in priority-then-age order),
the slots in use per scope and this worker's own running counts, all read in
the claim transaction; the store then writes exactly what it admitted. A run
whose scope is saturated is skipped, not waited on (no head-of-line
blocking), and its block reason lists every saturated scope.

A suspect (a run rescued from a lost worker, see domain/recovery.py) runs
beside any other work, but a worker runs the suspects of one group at a
time: the group it already runs, else the first group in claim order this
turn. A suspect of another group is passed over, like a run of a full
partition, and waits for a worker free of suspects (not blocked: it keeps
its place and no block reason). So a crash holds the suspects of at most one
group, which is what lets the rescue tell whose crash it was.

A run of a paused queue is never admitted (its queue's pause is its block
reason, shown from the rules, not stored per run); the claim does not even
read such runs (storage/shared/claiming.py), but every other caller of `admit`
(the overflow check, the limits preview) hands it queued runs as they are.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from tidegate.domain.ahead import WorkerRoom
from tidegate.domain.rate_charger import RateCharger, WindowStates
from tidegate.domain.rates import Charge
from tidegate.domain.saturation import Saturation
from tidegate.domain.scopes import Rules, ScopeNeed
from tidegate.domain.transitions import has_room


@dataclass(frozen=True)
class Candidate:
    id: str
    task: str
    queue: str
    partition: str
    tags: Mapping[str, str]
    priority: int
    scheduled_at: float  # any monotonic ordering of queue time will do
    ordering: str = "priority"  # the queue's ordering: "priority" or "fair"
    suspect: bool = False  # rescued from a lost worker (domain/recovery.py)
    group: str | None = None  # a suspect's group: one group at a time per worker (None: a group of its own)
    resumed: bool = False  # queued again after a wait on its children: goes first (claim_order)
    rate_partition: str = ""  # the partition of its queue's rate it is charged to
    rate_cost: int = 1  # cost units it takes of every window of its rate


@dataclass
class LocalUsage:
    """What this worker already runs: per queue, and per (queue, partition)."""

    per_queue: dict[str, int] = field(default_factory=dict)
    per_partition: dict[tuple[str, str], int] = field(default_factory=dict)
    # The group of the suspects this worker runs, if any (the store reads it whenever a suspect
    # is a candidate): it may take more of that group, and none of another.
    suspect_group: str | None = None


@dataclass(frozen=True)
class Admission:
    admitted: list[tuple[Candidate, list[ScopeNeed]]]
    blocked: dict[str, tuple[Saturation, ...]]
    rate_states: dict[tuple[str, int], int] = field(default_factory=dict)  # the windows charged: store these
    # when a claim's worth of the runs held back only by a rate may start (`gathered_at`): a
    # worker that found nothing else to claim comes back then
    next_allowed_at: float | None = None
    # per admitted run, what each window of its rate was charged: for a refund or a correction
    charges: dict[str, tuple[Charge, ...]] = field(default_factory=dict)
    # per rated run taken ahead of the worker's free slots, the lead (s) its charge allows: the
    # worker starts it within that of the claim's sending, or has it renewed (`ClaimedRun.lead`)
    leads: dict[str, float] = field(default_factory=dict)


def claim_order(
    candidates: Sequence[Candidate], lane_load: Mapping[tuple[str, str], int] | None = None
) -> list[Candidate]:
    """Resumed parents first, then priority desc, then age; in a fair queue, partitions take
    turns within a priority level.

    A resumed parent (queued again once the children it waited for ended)
    goes ahead of every other run of its queue, whatever their priority (and,
    as priority does, ahead of other queues' runs in a claim over several): it
    was admitted once and did work, and gave up its slots only so that its
    children could run; going first is as if it had kept them, so it can
    delay others no longer than a run that never waited. Each resume puts it
    first once: the claim that takes it clears the mark.

    In a fair queue a partition's next run ranks by how many of its runs are
    already running (`lane_load`, per (queue, partition)) plus those ahead of
    it here: the least-served partition goes first, so one tenant's backlog
    cannot take every free slot, even when slots free one at a time.
    """
    in_order = sorted(candidates, key=lambda c: (not c.resumed, -c.priority, c.scheduled_at, c.id))
    if all(candidate.ordering != "fair" for candidate in in_order):
        return in_order  # every rank 0 and every head its own time: the order below is this one
    load = lane_load or {}
    rank: dict[str, int] = {}
    head: dict[str, float] = {}
    lane_head: dict[tuple[str, bool, int, str], float] = {}
    lane_size: dict[tuple[str, bool, int, str], int] = defaultdict(int)
    for candidate in in_order:
        if candidate.ordering == "fair":
            lane = (candidate.queue, candidate.resumed, candidate.priority, candidate.partition)
            rank[candidate.id] = load.get((candidate.queue, candidate.partition), 0) + lane_size[lane]
            lane_size[lane] += 1
            head[candidate.id] = lane_head.setdefault(lane, candidate.scheduled_at)
        else:
            rank[candidate.id] = 0
            head[candidate.id] = candidate.scheduled_at
    return sorted(candidates, key=lambda c: (not c.resumed, -c.priority, rank[c.id], head[c.id], c.scheduled_at, c.id))


def _all_have_room(needs: Sequence[ScopeNeed], in_use: Mapping[str, int]) -> bool:
    """Whether every scope of `needs` has a slot free (`has_room`), written as a loop: `admit` asks
    it of every candidate, and a generator costs more than the checks."""
    for need in needs:  # noqa: SIM110 (a generator costs more than these checks, per candidate)
        if not has_room(in_use.get(need.key, 0), need.limit):
            return False
    return True


def admit(
    candidates: Sequence[Candidate],
    usage: Mapping[str, int],
    rules: Rules,
    local: LocalUsage,
    capacity: int,
    lane_load: Mapping[tuple[str, str], int] | None = None,
    rate_states: WindowStates | None = None,
    now: float = 0.0,
    ahead: int = 0,
) -> Admission:
    """Admit candidates in claim order while every scope, local cap and rate has room.

    `lane_load`: runs already running per (queue, partition), for fair queues.
    `rate_states`: the stored state of the rate windows of the candidates' queues,
    charged at `now` (the database's clock) last, once every other check let the
    run in, so a run is charged exactly when it is admitted: all or none.
    `ahead`: how many runs past `capacity` may be admitted ahead of the worker's free
    slots (`CycleRequest.claim_ahead`), each only as `WorkerRoom.fits_ahead` lets it.
    """
    rates = RateCharger(dict(rate_states or {}), now, rules)
    room = WorkerRoom(rules, capacity, ahead)
    in_use = dict(usage)
    per_queue = dict(local.per_queue)
    per_partition = dict(local.per_partition)
    admitted: list[tuple[Candidate, list[ScopeNeed]]] = []
    blocked: dict[str, tuple[Saturation, ...]] = {}
    # Runs of one partition with the same tags need the same scopes; a window holds many of them.
    known_needs: dict[tuple[str, str, tuple[tuple[str, str], ...]], list[ScopeNeed]] = {}
    held = local.suspect_group  # the one group of suspects this worker may run
    for candidate in claim_order(candidates, lane_load):
        if rules.is_paused(candidate.queue):
            continue
        shape = (candidate.queue, candidate.partition, tuple(sorted(candidate.tags.items())))
        needs = known_needs.get(shape)
        if needs is None:
            needs = known_needs[shape] = rules.scopes_for(candidate.queue, candidate.partition, candidate.tags)
        if not _all_have_room(needs, in_use):  # most candidates are not blocked: build reasons only then
            blocked[candidate.id] = tuple(
                Saturation(need.key, in_use.get(need.key, 0), need.limit)
                for need in needs
                if not has_room(in_use.get(need.key, 0), need.limit)
            )
            continue
        ahead = len(admitted) >= capacity
        # `charges_rates` is answered once per Rules: where no rate is in force, no run is charged
        lead = rates.ahead_lead(candidate, shape[2]) if ahead and rules.charges_rates else 0
        if ahead and not room.fits_ahead(
            len(admitted), candidate.queue, candidate.suspect, needs, in_use, lead is None
        ):
            continue  # this worker is full; another worker may take it
        if not _local_room(candidate, rules, per_queue, per_partition, held):
            continue
        waiting = rates.charge(candidate, shape[2], lead or 0) if rules.charges_rates else ()
        if waiting is None:
            continue  # its windows refuse it ahead; it is not blocked, a claim for a free slot may take it
        if waiting:
            blocked[candidate.id] = waiting
            continue
        held = suspect_group(candidate) if candidate.suspect else held
        room.took(len(admitted), needs)
        admitted.append((candidate, needs))
        for need in needs:
            in_use[need.key] = in_use.get(need.key, 0) + 1
        per_queue[candidate.queue] = per_queue.get(candidate.queue, 0) + 1
        lane = (candidate.queue, candidate.partition)
        per_partition[lane] = per_partition.get(lane, 0) + 1
    next_allowed = rates.next_allowed(max(1, capacity - len(admitted)))
    return Admission(admitted, blocked, rates.charged, next_allowed, rates.charges, rates.leads)


def suspect_group(candidate: Candidate) -> str:
    """The group a suspect runs in: a suspect rescued before groups existed is one of its own."""
    return candidate.group if candidate.group is not None else f"run {candidate.id}"


def _local_room(
    candidate: Candidate,
    rules: Rules,
    per_queue: Mapping[str, int],
    per_partition: Mapping[tuple[str, str], int],
    held: str | None,
) -> bool:
    """This worker's own caps: max_workers per queue, local_limit per partition; and the one group
    of suspects it runs (`held`): another group's suspect waits for a worker free of suspects."""
    if candidate.suspect and held is not None and suspect_group(candidate) != held:
        return False
    max_workers = rules.max_workers(candidate.queue)
    if max_workers is not None and per_queue.get(candidate.queue, 0) >= max_workers:
        return False
    local_limit = rules.local_limit(candidate.queue)
    lane = (candidate.queue, candidate.partition)
    return local_limit is None or per_partition.get(lane, 0) < local_limit
