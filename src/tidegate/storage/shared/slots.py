"""What both adapters share about step slots: limits and leases of the scopes a
step asks for and the grant decision around them (their events: domain/events.py),
with the named rates a step pays, charged in the same decision: all or none.

The adapters differ only in how they read usage and write rows; keeping the
rest here means a grant or a lease reads the same on SQLite and PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from tidegate.domain.errors import PoolRequestTooLarge, RateCostTooLarge, RateNotFound, TidegateError
from tidegate.domain.named_rates import RateVerdict, Windows, decide_rates, named_rate_scope
from tidegate.domain.pools import UNCONFIGURED_LEASE_SECONDS, check_request, decide_grant, pool_of
from tidegate.domain.steps import RateWait, ScopeUse, SlotGrant, SlotRequest


@dataclass(frozen=True, slots=True)
class Request:
    """A step's request with the limits and leases that apply to it, read in its transaction.

    `pools` maps each configured pool asked for to (limit, lease seconds);
    pools missing from it were never configured: unlimited, default lease.
    """

    needs: Mapping[str, int]
    pools: Mapping[str, tuple[int, float]]
    fixed_limits: Mapping[str, int]

    def limits(self) -> dict[str, int | None]:
        limits: dict[str, int | None] = {}
        for scope in self.needs:
            pool = pool_of(scope)
            if pool is None:
                limits[scope] = self.fixed_limits.get(scope)
            else:
                configured = self.pools.get(pool)
                limits[scope] = None if configured is None else configured[0]
        return limits

    def decide(self, used: Mapping[str, int], held: Mapping[str, int]) -> list[ScopeUse]:
        """The blocking scopes (empty: grant); raises PoolRequestTooLarge for a hopeless request."""
        limits = self.limits()
        check_request(self.needs, limits)
        return decide_grant(self.needs, used, limits, held)

    def lease_of(self, scope: str) -> float | None:
        """Seconds a pool holder is leased for; None for other scopes (they share the run's lease)."""
        pool = pool_of(scope)
        if pool is None:
            return None
        configured = self.pools.get(pool)
        return UNCONFIGURED_LEASE_SECONDS if configured is None else configured[1]

    def lease_seconds(self) -> float | None:
        """The shortest pool lease held: the PoolGuard renews every third of it."""
        leases = [lease for lease in map(self.lease_of, self.needs) if lease is not None]
        return min(leases) if leases else None

    def unconfigured(self) -> list[str]:
        return [pool for pool in map(pool_of, self.needs) if pool is not None and pool not in self.pools]


@dataclass(frozen=True, slots=True)
class Decision:
    """One step's request judged inside a transaction that already read limits and usage.

    `blocking` empty means granted. `error` is set for a request no limit
    can ever satisfy (nothing is written for it). `held` is what the step
    held before; `full`: once this is decided, a request like it would be
    refused (see `StepFinish`).
    """

    asked: SlotRequest
    request: Request
    blocking: list[ScopeUse]
    held: Mapping[str, int]
    full: bool
    error: TidegateError | None = None
    rates: RateVerdict | None = None  # the named rates' answer (None: none asked, or the pools had no room)
    now: float = 0.0  # the store's clock when decided: a rate's wait is counted from it

    @property
    def granted(self) -> bool:
        return self.error is None and not self.blocking and (self.rates is None or self.rates.allowed)

    @property
    def writes_holders(self) -> bool:
        """Granted with holder rows to write: False for a step that already held every slot."""
        return self.granted and dict(self.held) != dict(self.asked.needs)

    @property
    def rate_wait(self) -> RateWait | None:
        """The named rate that holds the step back while its pools have room (else None)."""
        verdict = self.rates
        if verdict is None or verdict.held_by is None or verdict.retry_at is None:
            return None
        return RateWait(verdict.held_by, verdict.held_label, max(0.0, verdict.retry_at - self.now))

    def grant(self) -> SlotGrant:
        if self.error is not None:
            raise self.error
        return SlotGrant(self.granted, self.blocking, self.request.lease_seconds(), rate_wait=self.rate_wait)


@dataclass(frozen=True, slots=True)
class RateReads:
    """The named rates' windows in force and their stored states, read in the deciding transaction
    (after the rates' scope rows are locked on PostgreSQL; SQLite's single writer otherwise), at `now`."""

    windows: Mapping[str, Windows]
    states: Mapping[tuple[str, int], int]
    now: float


def rate_scopes(requests: Sequence[SlotRequest]) -> list[str]:
    """The scope keys of every named rate the requests pay, in key order (what a claim locks)."""
    return sorted({named_rate_scope(name) for asked in requests for name in asked.rates})


def rate_names(requests: Sequence[SlotRequest]) -> list[str]:
    return sorted({name for asked in requests for name in asked.rates})


def tally_usage(
    rows: Iterable[tuple[str, int, Mapping[str, int] | None]], steps_by_holder: Mapping[str, str]
) -> tuple[dict[str, int], dict[str, dict[str, int]]]:
    """From `acquire_slots_usage` rows (scope, slots in use, {holder: slots} of the askers):
    the slots in use per scope, and what each asking step (by key) holds."""
    used: dict[str, int] = {}
    held: dict[str, dict[str, int]] = {}
    for scope, total, mine in rows:
        used[scope] = total
        for holder, count in (mine or {}).items():
            held.setdefault(steps_by_holder[holder], {})[scope] = count
    return used, held


def decide_in_order(
    requests: Sequence[SlotRequest],
    pools: Mapping[str, tuple[int, float]],
    used: Mapping[str, int],
    held: Mapping[str, Mapping[str, int]],
    rates: RateReads | None = None,
) -> list[Decision]:
    """Judge requests one after another, each seeing the grants (and rate charges) before it.

    `used` is every holder's slots per scope; `held` what each step (by key)
    holds already; `rates` the named rates the requests pay. The caller holds
    the scopes' locks, the rates' included (or SQLite's single writer), so
    these local tallies stay exact until it commits the grants. A request
    whose pools have room is then charged its rates: refused by one, it takes
    nothing (all or none) and says when the rate allows it.
    """
    tally = dict(used)
    states = dict(rates.states) if rates is not None else {}
    decisions = []
    for asked in requests:
        request = Request(asked.needs, pools, asked.fixed_limits)
        mine = held.get(asked.step_key, {})
        now = rates.now if rates is not None else 0.0
        try:
            blocking = request.decide(tally, mine)
        except PoolRequestTooLarge as error:
            decisions.append(Decision(asked, request, [], mine, False, error))
            continue
        verdict = None
        if not blocking and asked.rates and (not asked.needs or dict(mine) != dict(asked.needs)):
            if rates is None:
                raise ValueError("a request that pays named rates needs their reads")
            try:
                verdict = decide_rates(asked.rates, rates.windows, states, now)
            except (RateNotFound, RateCostTooLarge) as error:
                decisions.append(Decision(asked, request, [], mine, False, error, now=now))
                continue
        if not blocking and (verdict is None or verdict.allowed):
            for scope, count in asked.needs.items():
                tally[scope] = tally.get(scope, 0) - mine.get(scope, 0) + count
            if verdict is not None:
                states.update(verdict.states)
        full = (
            bool(blocking)
            or (verdict is not None and not verdict.allowed)
            or bool(decide_grant(asked.needs, tally, request.limits(), {}))
        )
        decisions.append(Decision(asked, request, blocking, mine, full, rates=verdict, now=now))
    return decisions


def moved_grant(needs: Mapping[str, int], moved: list[tuple[str, int, float]]) -> SlotGrant | None:
    """The grant of slots handed on whole: `moved` rows are (scope, slots, new lease seconds);
    None if they are not every slot asked for."""
    if {scope: count for scope, count, _ in moved} != dict(needs):
        return None
    leases = [lease for scope, _, lease in moved if pool_of(scope) is not None]
    return SlotGrant(True, [], min(leases) if leases else None)


def held_grant(decision: Decision) -> SlotGrant | None:
    """A grant of what the step already holds, if it holds every slot it asked for (else None),
    whatever the limits say now: it is not a new claim."""
    if dict(decision.held) != dict(decision.asked.needs):
        return None
    return SlotGrant(True, [], decision.request.lease_seconds())
