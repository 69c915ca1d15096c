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

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from tidegate.domain.ahead import WorkerRoom
from tidegate.domain.durations import format_duration
from tidegate.domain.rates import Charge, Held, Rate, charged, held, interval, take, to_ns, window_key
from tidegate.domain.scopes import Rules, ScopeNeed
from tidegate.domain.transitions import has_room

RateStates = Mapping[tuple[str, int], int]  # (rate scope, window in ns) -> GCRA's TAT in ns


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


@dataclass(frozen=True)
class Saturation:
    """A scope that had no free slot for a candidate: part of its block reason."""

    scope: str
    used: int
    limit: int
    per: float | None = None  # a rate's window (s): `used` of `limit` per `per` are taken
    retry_at: float | None = None  # a rate: when its windows next allow the start (database clock)

    def __str__(self) -> str:
        if self.per is None:
            return f"{self.scope} {self.used}/{self.limit}"
        return f"{self.scope} {self.used} of {self.limit} per {format_duration(self.per)} used"


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
    rate_states: RateStates | None = None,
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
    rates = _RateCharger(dict(rate_states or {}), now, rules)
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
        if len(admitted) >= capacity and not room.fits_ahead(
            len(admitted), candidate.queue, candidate.suspect, needs, in_use, rates.rated(candidate, shape[2])
        ):
            continue  # this worker is full; another worker may take it
        if not _local_room(candidate, rules, per_queue, per_partition):
            continue
        group = suspect_group(candidate) if candidate.suspect else None
        if group not in (None, held) and held is not None:
            continue  # another group's suspect: a worker free of suspects takes it
        # `charges_rates` is answered once per Rules: where no rate is in force, no run is charged
        waiting = rates.charge(candidate, shape[2]) if rules.charges_rates else ()
        if waiting:
            blocked[candidate.id] = waiting
            continue
        held = group or held
        room.took(len(admitted), needs)
        admitted.append((candidate, needs))
        for need in needs:
            in_use[need.key] = in_use.get(need.key, 0) + 1
        per_queue[candidate.queue] = per_queue.get(candidate.queue, 0) + 1
        lane = (candidate.queue, candidate.partition)
        per_partition[lane] = per_partition.get(lane, 0) + 1
    next_allowed = rates.next_allowed(max(1, capacity - len(admitted)))
    return Admission(admitted, blocked, rates.charged, next_allowed, rates.charges)


def gathered_at(
    scopes: Sequence[tuple[str, tuple[Rate, ...]]], states: RateStates, cost: int, waiting: int, now: float
) -> float | None:
    """When the rates `scopes` allow a claim's worth of the `waiting` starts of `cost` they hold back:
    as many as half the smallest burst holds (at least one), or all of them if fewer.

    A worker that came back for each start as soon as its one token was due would claim
    once per token: at 200 a second, 200 claims, each reading and refusing the runs
    behind it. Half the burst leaves the other half for the claim to arrive in before
    the bucket is full and tokens go unused, so the rate is still reached; a burst of 1
    (evenly spaced starts) is one start per claim, as before. None: the cost exceeds a
    window's burst and is never allowed.
    """
    keys = [(scope, window_key(rate)) for scope, windows in scopes for rate in windows]
    windows = [rate for _, scope_windows in scopes for rate in scope_windows]
    smallest = min(rate.allowed_burst for rate in windows)
    if cost > smallest:
        return None
    batch = max(1, min(waiting, -(-smallest // 2) // cost))
    retry = take([states.get(key) for key in keys], windows, cost * batch, now).retry_at
    return retry if retry != math.inf else None


RateKeys = tuple[tuple[str, int], ...]  # (rate scope, window in ns) of every window a start is charged
RateScopes = tuple[tuple[str, tuple[Rate, ...]], ...]  # (rate scope, its windows) a start is charged


class RateWindows(NamedTuple):
    """Every rate window a start of one shape is charged, worked out once per claim decision: the
    runs of a rate partition with the same tags are charged the same windows."""

    scopes: RateScopes  # (rate scope, its windows), in key order (`Rules.rate_scopes`)
    keys: RateKeys  # the stored state's key of each window, in the same order
    rates: tuple[Rate, ...]  # each window, in the same order
    steps: tuple[int, ...]  # each window's emission interval (ns): what a charge records
    bursts: tuple[int, ...]  # each window's burst: the most cost it takes at one instant


def rate_windows(scopes: Sequence[tuple[str, tuple[Rate, ...]]]) -> RateWindows:
    """The windows `scopes` charge, keyed and with their intervals."""
    flat = [(scope, rate) for scope, windows in scopes for rate in windows]
    return RateWindows(
        tuple(scopes),
        tuple((scope, window_key(rate)) for scope, rate in flat),
        tuple(rate for _, rate in flat),
        tuple(interval(rate) for _, rate in flat),
        tuple(rate.allowed_burst for _, rate in flat),
    )


@dataclass
class _RateCharger:
    """The rate windows' states through one claim decision: what it charged, what it refused."""

    states: dict[tuple[str, int], int]
    now: float
    rules: Rules
    at: int = field(init=False)  # `now` in ns (`to_ns`): the instant every charge of this decision is taken at
    charged: dict[tuple[str, int], int] = field(default_factory=dict)
    # per admitted run, what each window of its rate was charged: for a refund or a correction
    charges: dict[str, tuple[Charge, ...]] = field(default_factory=dict)
    # Each refusal by its windows and cost, until the next charge: the answer depends only on
    # those windows' states, which nothing but a charge moves. A paced backlog's claim reads
    # a window of runs the rate refuses one after another; each is then a look-up, not GCRA's
    # arithmetic over exact fractions twice (`take`, then `held` per rate).
    refusals: dict[tuple[RateKeys, int], tuple[Saturation, ...]] = field(default_factory=dict)
    waiting: dict[tuple[RateScopes, int], int] = field(default_factory=dict)  # runs held until a time, by rates
    # The windows of each (queue, rate partition, tags) met: the runs of one such shape in a window
    # are charged the same windows, looked up once (empty where no rate of theirs is in force).
    known: dict[tuple[str, str, tuple[tuple[str, str], ...]], RateWindows] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.at = to_ns(self.now)

    def windows(self, candidate: Candidate, tags: tuple[tuple[str, str], ...]) -> RateWindows:
        """Every window the candidate's start is charged (none: no rate of its is in force)."""
        shape = (candidate.queue, candidate.rate_partition, tags)
        windows = self.known.get(shape)
        if windows is None:
            scopes = self.rules.rate_scopes(candidate.queue, candidate.rate_partition, candidate.tags)
            windows = self.known[shape] = rate_windows(scopes)
        return windows

    def rated(self, candidate: Candidate, tags: tuple[tuple[str, str], ...]) -> bool:
        """Whether a rate charges the candidate's start (its queue's, or one of its `tags`): such a
        run is never taken ahead of the worker's free slots (`WorkerRoom`)."""
        return self.rules.charges_rates and bool(self.windows(candidate, tags).scopes)

    def charge(self, candidate: Candidate, tags: tuple[tuple[str, str], ...]) -> tuple[Saturation, ...]:
        """Take the candidate's cost from every window of every rate it is charged (its queue's and
        those of its `tags`, sorted), recording what it took, for a refund; or take nothing and
        name each rate that holds it back, until when (empty: taken, or no rate)."""
        windows = self.windows(candidate, tags)
        if not windows.scopes:
            return ()
        refused = self.refusals.get((windows.keys, candidate.rate_cost))
        if refused is None:
            refused = self._take(candidate, windows)
        if refused and _all_allow(refused) is not None:
            held_back = (windows.scopes, candidate.rate_cost)
            self.waiting[held_back] = self.waiting.get(held_back, 0) + 1
        return refused

    def _take(self, candidate: Candidate, windows: RateWindows) -> tuple[Saturation, ...]:
        states, now, cost, at = self.states, self.now, candidate.rate_cost, self.at
        before = [states.get(key) for key in windows.keys]
        # GCRA's rule on the shape's intervals and bursts, worked out once (`take` answers with it too)
        after = charged(before, windows.steps, windows.bursts, cost, at)
        if after is not None:
            self.refusals.clear()  # the states moved: what was refused may be refused until later now
            self.charges[candidate.id] = tuple(
                Charge(key[0], key[1], old, new, cost, step, at)
                for key, old, new, step in zip(windows.keys, before, after, windows.steps, strict=True)
            )
            for key, new in zip(windows.keys, after, strict=True):
                states[key] = self.charged[key] = new
            return ()
        reasons = []
        for scope, scope_windows in windows.scopes:
            refusal = held(
                [states.get((scope, window_key(rate))) for rate in scope_windows],
                scope_windows,
                cost,
                now,
            )
            if refusal is not None:
                reasons.append(rate_saturation(scope, refusal))
        self.refusals[windows.keys, cost] = tuple(reasons)
        return tuple(reasons)

    def next_allowed(self, room: int) -> float | None:
        """When a claim's worth of the runs rates held back may start (`gathered_at`), for a
        worker with `room` free slots left."""
        found: float | None = None
        for (scopes, cost), count in self.waiting.items():
            found = _earliest(found, gathered_at(scopes, self.states, cost, min(count, room), self.now))
        return found


def _all_allow(refusals: Sequence[Saturation]) -> float | None:
    """When every rate that refused a start allows it (None: one never will)."""
    times = [refusal.retry_at for refusal in refusals]
    return None if None in times else max(time for time in times if time is not None)


def rate_saturation(scope: str, refused: Held) -> Saturation:
    """A rate's refusal as a block reason: its binding window full (`limit` of `limit` used)."""
    rate = refused.rate
    return Saturation(scope, rate.limit, rate.limit, per=rate.seconds, retry_at=refused.retry_at)


def _earliest(known: float | None, retry_at: float | None) -> float | None:
    """The sooner of two times a rate allows a start (None: a cost that never fits allows none)."""
    if retry_at is None:
        return known
    return retry_at if known is None else min(known, retry_at)


def suspect_group(candidate: Candidate) -> str:
    """The group a suspect runs in: a suspect rescued before groups existed is one of its own."""
    return candidate.group if candidate.group is not None else f"run {candidate.id}"


def _local_room(
    candidate: Candidate,
    rules: Rules,
    per_queue: Mapping[str, int],
    per_partition: Mapping[tuple[str, str], int],
) -> bool:
    """This worker's own caps: max_workers per queue, local_limit per partition."""
    max_workers = rules.max_workers(candidate.queue)
    if max_workers is not None and per_queue.get(candidate.queue, 0) >= max_workers:
        return False
    local_limit = rules.local_limit(candidate.queue)
    lane = (candidate.queue, candidate.partition)
    return local_limit is None or per_partition.get(lane, 0) < local_limit
