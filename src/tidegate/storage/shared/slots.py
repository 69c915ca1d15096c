"""What both adapters share about step slots: limits and leases of the scopes a
step asks for and the grant decision around them (their events: domain/events.py).

The adapters differ only in how they read usage and write rows; keeping the
rest here means a grant or a lease reads the same on SQLite and PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from tidegate.domain.errors import PoolRequestTooLarge
from tidegate.domain.pools import UNCONFIGURED_LEASE_SECONDS, check_request, decide_grant, pool_of
from tidegate.domain.steps import ScopeUse, SlotGrant, SlotRequest


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
    error: PoolRequestTooLarge | None = None

    @property
    def granted(self) -> bool:
        return self.error is None and not self.blocking

    @property
    def writes_holders(self) -> bool:
        """Granted with holder rows to write: False for a step that already held every slot."""
        return self.granted and dict(self.held) != dict(self.asked.needs)

    def grant(self) -> SlotGrant:
        if self.error is not None:
            raise self.error
        return SlotGrant(self.granted, self.blocking, self.request.lease_seconds())


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
) -> list[Decision]:
    """Judge requests one after another, each seeing the grants before it.

    `used` is every holder's slots per scope; `held` what each step (by key)
    holds already. The caller holds the scopes' locks (or SQLite's single
    writer), so this local tally stays exact until it commits the grants.
    """
    tally = dict(used)
    decisions = []
    for asked in requests:
        request = Request(asked.needs, pools, asked.fixed_limits)
        mine = held.get(asked.step_key, {})
        try:
            blocking = request.decide(tally, mine)
        except PoolRequestTooLarge as error:
            decisions.append(Decision(asked, request, [], mine, False, error))
            continue
        if not blocking:
            for scope, count in asked.needs.items():
                tally[scope] = tally.get(scope, 0) - mine.get(scope, 0) + count
        full = bool(blocking) or bool(decide_grant(asked.needs, tally, request.limits(), {}))
        decisions.append(Decision(asked, request, blocking, mine, full))
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
