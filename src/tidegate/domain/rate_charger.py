"""Rate charges inside one claim decision: which windows a start is charged, what it took, why
a run waits for a rate, and the leads of runs taken ahead of a worker's free slots.

`admit` (domain/admission.py) asks a `RateCharger` of every candidate once its
other checks let it in, so a run is charged exactly when it is admitted. A run
taken ahead is charged with a lead it must start within (domain/rates.py,
`charged`); a worker whose run is still waiting when the lead runs out has it
recharged by its next cycle (`recharge`), charged again with a fresh lead, or handed
back when the windows refuse.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

from tidegate.domain.named_rates import named_rate_of
from tidegate.domain.rates import (
    LEAD_CAP_NS,
    NS,
    Charge,
    Held,
    Rate,
    ahead_lead,
    charged,
    held,
    interval,
    roomy,
    take,
    to_ns,
    window_key,
)
from tidegate.domain.saturation import Saturation
from tidegate.domain.scopes import TAG_RATE_PREFIX, Rules


class ChargedRun(Protocol):
    """What a charge reads of a run: a claim's candidate (`domain.admission.Candidate`), or a run whose lead
    ran out."""

    @property
    def id(self) -> str: ...
    @property
    def queue(self) -> str: ...
    @property
    def tags(self) -> Mapping[str, str]: ...
    @property
    def rate_partition(self) -> str: ...
    @property
    def rate_cost(self) -> int: ...


KNOWN_SHAPES = 100_000  # run shapes whose windows the rules keep (`Rules.charge_windows`)
WindowStates = Mapping[tuple[str, int], int]  # (rate scope, window in ns) -> GCRA's TAT in ns


def gathered_at(
    scopes: Sequence[tuple[str, tuple[Rate, ...]]], states: WindowStates, cost: int, waiting: int, now: float
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
class RateCharger:
    """The rate windows' states through one claim decision: what it charged, what it refused."""

    states: dict[tuple[str, int], int]
    now: float
    rules: Rules
    at: int = field(init=False)  # `now` in ns (`to_ns`): the instant every charge of this decision is taken at
    charged: dict[tuple[str, int], int] = field(default_factory=dict)
    # per admitted run, what each window of its rate was charged: for a refund or a correction
    charges: dict[str, tuple[Charge, ...]] = field(default_factory=dict)
    leads: dict[str, float] = field(default_factory=dict)  # per run taken ahead, its lead (s)
    # Each refusal by its windows and cost, until the next charge: the answer depends only on
    # those windows' states, which nothing but a charge moves. A paced backlog's claim reads
    # a window of runs the rate refuses one after another; each is then a look-up, not GCRA's
    # arithmetic over exact fractions twice (`take`, then `held` per rate).
    refusals: dict[tuple[RateKeys, int], tuple[Saturation, ...]] = field(default_factory=dict)
    waiting: dict[tuple[RateScopes, int], int] = field(default_factory=dict)  # runs held until a time, by rates
    # The windows of each (queue, rate partition, tags) met: the runs of one such shape are charged
    # the same windows, worked out once for the rules (`Rules.charge_windows`; empty where no
    # rate of theirs is in force).
    known: dict[tuple[str, str, tuple[tuple[str, str], ...]], RateWindows] = field(init=False)

    read: dict[tuple[str, int], int] = field(init=False)  # the states as the decision found them
    leads_of: dict[RateKeys, int | None] = field(default_factory=dict)  # `ahead_lead` per windows

    def __post_init__(self) -> None:
        self.at = to_ns(self.now)
        self.read = dict(self.states)
        self.known = self.rules.charge_windows

    def windows(self, candidate: ChargedRun, tags: tuple[tuple[str, str], ...]) -> RateWindows:
        """Every window the candidate's start is charged (none: no rate of its is in force)."""
        shape = (candidate.queue, candidate.rate_partition, tags)
        windows = self.known.get(shape)
        if windows is None:
            windows = rate_windows(self.rules.rate_scopes(candidate.queue, candidate.rate_partition, candidate.tags))
            if len(self.known) < KNOWN_SHAPES:  # runs partitioned by unique args are shapes without end
                self.known[shape] = windows
        return windows

    def ahead_lead(self, candidate: ChargedRun, tags: tuple[tuple[str, str], ...]) -> int | None:
        """The lead (ns) the candidate's charge allows if it is taken ahead of the worker's free
        slots (0: no rate charges it), or None: it may not wait ahead.

        A run charged only its queue's rate, none of whose windows adapts, may wait ahead
        while every window has used at most half its burst (`roomy`): its charge is then
        counted from the end of its lead (`domain.rates.charged`). A tag's rate is charged
        by claimers of every queue, outside the queue's claim turn that serializes the
        recharge of a lead (`Store.cycle`), and an adaptive window reads a charge's `before`
        as its use, which a run taken ahead does not record: such runs start at their charge."""
        windows = self.windows(candidate, tags)
        if not windows.scopes:
            return 0
        # one answer per windows for the decision: it reads only the windows and the states as read
        lead = self.leads_of.get(windows.keys, -1)
        if lead == -1:
            lead = self.leads_of[windows.keys] = self._lead(windows)
        return lead

    def _lead(self, windows: RateWindows) -> int | None:
        if any(scope.startswith(TAG_RATE_PREFIX) for scope, _ in windows.scopes) or any(
            rate.adaptive is not None for rate in windows.rates
        ):
            return None
        lead = ahead_lead(windows.steps, windows.bursts)
        # judged on the states as read: this decision's own leads use the other half of the burst
        states = [self.read.get(key) for key in windows.keys]
        return lead if lead and roomy(states, windows.steps, windows.bursts, self.at) else None

    def charge(
        self, candidate: ChargedRun, tags: tuple[tuple[str, str], ...], lead: int = 0
    ) -> tuple[Saturation, ...] | None:
        """Take the candidate's cost from every window of every rate it is charged (its queue's and
        those of its `tags`, sorted), recording what it took, for a refund; or take nothing and
        name each rate that holds it back, until when (empty: taken, or no rate).

        A run taken ahead is charged with its `lead` (`ahead_lead`) and records a charge that
        gives nothing back; None when its windows refuse that: it is not taken ahead, and not
        blocked either (a claim for a free slot may still take it)."""
        windows = self.windows(candidate, tags)
        if not windows.scopes:
            return ()
        if lead:
            if not self._charged(candidate, windows, lead):
                return None
            self.leads[candidate.id] = lead / NS
            return ()
        refused = self.refusals.get((windows.keys, candidate.rate_cost))
        if refused is None:
            refused = self._take(candidate, windows)
        if refused and _all_allow(refused) is not None:
            held_back = (windows.scopes, candidate.rate_cost)
            self.waiting[held_back] = self.waiting.get(held_back, 0) + 1
        return refused

    def _charged(self, candidate: ChargedRun, windows: RateWindows, lead: int) -> bool:
        """Charge every window of `windows` the candidate's cost at `at` with `lead`, all or none."""
        states, cost, at = self.states, candidate.rate_cost, self.at
        before = [states.get(key) for key in windows.keys]
        # GCRA's rule on the shape's intervals and bursts, worked out once (`take` answers with it too)
        after = charged(before, windows.steps, windows.bursts, cost, at, lead)
        if after is None:
            return False
        self.refusals.clear()  # the states moved: what was refused may be refused until later now
        # taken ahead: `before == after`, so that a give-back returns nothing (`domain.rates.unspent`)
        self.charges[candidate.id] = tuple(
            [
                Charge(key[0], key[1], new if lead else old, new, cost, step, at)
                for key, old, new, step in zip(windows.keys, before, after, windows.steps, strict=True)
            ]
        )
        for key, new in zip(windows.keys, after, strict=True):
            states[key] = self.charged[key] = new
        return True

    def _take(self, candidate: ChargedRun, windows: RateWindows) -> tuple[Saturation, ...]:
        if self._charged(candidate, windows, 0):
            return ()
        states, now, cost = self.states, self.now, candidate.rate_cost
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
            found = earliest(found, gathered_at(scopes, self.states, cost, min(count, room), self.now))
        return found


def _all_allow(refusals: Sequence[Saturation]) -> float | None:
    """When every rate that refused a start allows it (None: one never will)."""
    times = [refusal.retry_at for refusal in refusals]
    return None if None in times else max(time for time in times if time is not None)


def rate_saturation(scope: str, refused: Held) -> Saturation:
    """A rate's refusal as a block reason: its binding window full (`limit` of `limit` used)."""
    rate = refused.rate
    return Saturation(scope, rate.limit, rate.limit, per=rate.seconds, retry_at=refused.retry_at)


def earliest(known: float | None, retry_at: float | None) -> float | None:
    """The sooner of two times a rate allows a start (None: none known, or a cost that never fits)."""
    if retry_at is None:
        return known
    return retry_at if known is None else min(known, retry_at)


def lead_kept(scope: str) -> int:
    """The furthest lead (ns) a run taken ahead may have been charged with on a window of `scope`:
    what a give-back there keeps (`domain.rates.unspent`). Only a queue's own rate takes runs
    ahead (`RateCharger.ahead_lead`); a tag's and a named rate's windows keep none."""
    if scope.startswith(TAG_RATE_PREFIX) or named_rate_of(scope) is not None:
        return 0
    return LEAD_CAP_NS


@dataclass(frozen=True)
class Recharge:
    """What recharging the charges of runs waiting ahead on a worker decided."""

    # per run recharged: its fresh lead (s), or None: no deadline (charged to start at once, or no
    # rate charges it now); a run left out waits on the worker for the next try
    leads: dict[str, float | None]
    rate_states: dict[tuple[str, int], int]  # the windows charged: store these
    next_allowed_at: float | None  # when the rates allow the runs left out (`gathered_at`)


def recharge(
    candidates: Sequence[ChargedRun], rate_states: WindowStates, rules: Rules, now: float, at_once: int
) -> Recharge:
    """Charge again each run taken ahead whose lead ran out before a slot freed, at `now`.

    The first `at_once` runs (the worker has a free slot for each) are charged as a
    claim charges a run for a free slot: they start as soon as the cycle returns,
    with no lead to miss however long it took. The others are charged as a claim
    charges a run it takes ahead, with a fresh lead (`RateCharger.ahead_lead`),
    while the rate's windows are roomy. A run neither allows waits on the worker
    (its slots held) and is tried again by its next cycle; the rates say when
    (`next_allowed_at`). Each earlier charge stays spent: a run taken ahead records
    `before == after`, and gives nothing back.
    """
    rates = RateCharger(dict(rate_states), now, rules)
    leads: dict[str, float | None] = {}
    for index, candidate in enumerate(candidates):
        tags = tuple(sorted(candidate.tags.items()))
        if index < at_once:
            if rates.charge(candidate, tags) == ():
                leads[candidate.id] = None
            continue
        lead = rates.ahead_lead(candidate, tags) if rules.charges_rates else 0
        if lead == 0:
            leads[candidate.id] = None  # no rate charges it any more: it starts as any run
        elif lead is not None and rates.charge(candidate, tags, lead) == ():
            leads[candidate.id] = rates.leads[candidate.id]
    return Recharge(leads, rates.charged, rates.next_allowed(max(1, at_once)))
