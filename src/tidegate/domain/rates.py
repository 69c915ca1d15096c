"""Rate limits: at most `limit` starts (or cost units) in any window of length `per`.

A rate keeps one number per key and window, GCRA's theoretical arrival time
(TAT), never a row per start. GCRA is a token bucket seen from the side: a
start of cost `c` is allowed at `now` when `max(TAT, now) + c*T <= now + burst*T`,
and moves TAT to `max(TAT, now) + c*T`, with `T` the emission interval.

What GCRA guarantees, and the choice of `T` that follows (proved in
tests/unit/test_rates_model.py against a log of every start):

* In any half-open window of length `per`, the admitted cost is less than
  `per/T + burst`. So GCRA with `burst = limit` and `T = per/limit` (the usual
  "burst = limit" reading) lets through up to `2*limit - 1` in one window:
  `limit` at once, then one every `T` from the next instant on. It is a
  token bucket, not a window limit.
* With `T = per / (limit + 1 - burst)` the bound is exactly `limit`: never more
  than `limit` in any window of length `per`, for any costs and any arrival
  times. The price of a burst is sustained rate: `limit + 1 - burst` per `per`.
  The default burst is a twentieth of the limit (at least 1), which keeps
  95 % of the rate and lets a claim take a few tokens at once (so the time a
  claim takes does not cost tokens); `burst=1` is the full rate, evenly spaced.
* It admits exactly when the token bucket of that size and refill has room
  (`conforms` in the tests' model), and a cost above `burst` is never admitted.

Times are seconds on the database's clock, passed in as `now`; the arithmetic
is in whole nanoseconds, each rounding taken on the side that admits less.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import NamedTuple

from tidegate.domain.adaptive import Adaptive
from tidegate.domain.durations import format_duration, parse_duration
from tidegate.domain.errors import ConfigurationError
from tidegate.domain.integers import STORED_INT_MAX

# A window shorter than this cannot be honoured by a claim that takes milliseconds.
MIN_PER = 0.001
NS = 10**9  # states and arithmetic in whole nanoseconds: exact, so rounding never admits more
# The longest lead a run taken ahead of a worker's free slots is charged with (`ahead_lead`): runs
# taken ahead wait about 50 ms for a slot on a busy worker (docs/rates.md).
LEAD_CAP_NS = NS // 10


@dataclass(frozen=True)
class Rate:
    """At most `limit` starts (cost units) in any window of `per` (a human duration like "1m")."""

    limit: int
    per: str | float
    burst: int | None = None
    # The limit follows its downstream (AIMD within [min, limit], domain/adaptive.py): lowered when the
    # queue's runs report overload, raised after successes; each partition of the rate on its own.
    adaptive: Adaptive | None = None

    def __post_init__(self) -> None:
        limit = self.limit
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= STORED_INT_MAX:
            raise ConfigurationError(f"Rate.limit must be a whole number from 1 to {STORED_INT_MAX}, got {limit!r}")
        parse_duration(self.per, name="Rate.per", minimum=MIN_PER)
        burst = self.burst
        if burst is not None and (isinstance(burst, bool) or not isinstance(burst, int) or not 1 <= burst <= limit):
            raise ConfigurationError(f"Rate.burst must be a whole number from 1 to the limit {limit}, got {burst!r}")
        if self.adaptive is not None:
            if not isinstance(self.adaptive, Adaptive):
                raise ConfigurationError(f"Rate.adaptive must be a tidegate.Adaptive, got {self.adaptive!r}")
            self.adaptive.ceiling(limit, f"Rate({limit}, {self.per!r})")

    @property
    def seconds(self) -> float:
        """The window's length in seconds."""
        return parse_duration(self.per, name="Rate.per", minimum=MIN_PER)

    @property
    def allowed_burst(self) -> int:
        """The most cost taken at one instant (and so the largest cost one start may have)."""
        return self.burst if self.burst is not None else max(1, self.limit // 20)

    @property
    def sustained(self) -> int:
        """Cost units per window a steady backlog gets: `limit + 1 - burst`."""
        return self.limit + 1 - self.allowed_burst

    @property
    def label(self) -> str:
        """'60/1m': how surfaces name the window."""
        return f"{self.limit}/{format_duration(self.seconds)}"

    @property
    def adaptive_ceiling(self) -> int | None:
        """The top of an adaptive rate's range (`Adaptive.max`, else the limit); None when not adaptive."""
        return None if self.adaptive is None else self.adaptive.ceiling(self.limit, "rate")

    def to_json(self) -> dict[str, object]:
        """The stored form (per in seconds), read back by `from_json`; `adaptive` only when declared."""
        adaptive = {} if self.adaptive is None else {"adaptive": self.adaptive.to_json()}
        return {"limit": self.limit, "per": self.seconds, "burst": self.allowed_burst, **adaptive}

    @classmethod
    def from_json(cls, data: object) -> Rate:
        if not isinstance(data, dict):
            raise ConfigurationError(f"a stored rate must be an object, got {data!r}")
        adaptive = data.get("adaptive")
        return cls(
            limit=data["limit"],
            per=data["per"],
            burst=data.get("burst"),
            adaptive=None if not adaptive else Adaptive.from_json(adaptive),
        )


def check_rates(value: object, what: str = "rate") -> tuple[Rate, ...]:
    """A rate declaration: one `Rate` or a list of them (every window must allow), none twice."""
    if value is None:
        return ()
    rates = [value] if isinstance(value, Rate) else value
    if isinstance(rates, (str, bytes)) or not isinstance(rates, Sequence):
        raise ConfigurationError(f"{what}: expected a Rate or a list of Rate, got {value!r}")
    seen: set[float] = set()
    for rate in rates:
        if not isinstance(rate, Rate):
            raise ConfigurationError(f"{what}: expected Rate(limit=..., per=...), got {rate!r}")
        if rate.seconds in seen:
            raise ConfigurationError(f"{what}: two rates with the window {format_duration(rate.seconds)}")
        seen.add(rate.seconds)
    return tuple(rates)


@dataclass(frozen=True)
class Taken:
    """A `take`'s answer: allowed or not, the states to store, and when this cost would be allowed."""

    allowed: bool
    states: tuple[int | None, ...]  # TAT per window in ns; unchanged when not allowed
    retry_at: float  # the earliest time every window allows the cost: `now` when allowed, inf if never


def to_ns(now: float) -> int:
    """A time in whole nanoseconds, rounded up: the instant the limiter counts a start at.

    Exact: the float's own ratio of integers, scaled and rounded up in integers (what
    `math.ceil(Fraction(now) * NS)` computes, without building Fractions on every claim)."""
    numerator, denominator = now.as_integer_ratio()
    return -(-numerator * NS // denominator)


@functools.lru_cache(maxsize=4096)  # a claim asks it of every rated candidate it reads: exact, so kept
def window_key(rate: Rate) -> int:
    """A window's key in the stored state: its length in ns (a scope has one window per length)."""
    return round(Fraction(rate.seconds) * NS)


@functools.lru_cache(maxsize=4096)
def interval(rate: Rate) -> int:
    """GCRA's emission interval T = per / (limit + 1 - burst) in ns, rounded up (never a faster rate)."""
    return -(-window_key(rate) // rate.sustained)


def take(states: Sequence[int | None], rates: Sequence[Rate], cost: int, now: float) -> Taken:
    """Charge `cost` to every window at `now`, all or none (`None` is a window never charged)."""
    if len(states) != len(rates):
        raise ValueError("one state per window")
    if isinstance(cost, bool) or not isinstance(cost, int) or cost < 1:
        raise ValueError(f"a rate cost is a whole number of at least 1, got {cost!r}")
    at = to_ns(now)
    after = charged(states, [interval(rate) for rate in rates], [rate.allowed_burst for rate in rates], cost, at)
    if after is not None:
        return Taken(True, after, now)
    if any(cost > rate.allowed_burst for rate in rates):
        return Taken(False, tuple(states), math.inf)
    # allowed once at >= TAT + (cost - burst) * T, in every window
    retry = max(
        (
            state + (cost - rate.allowed_burst) * interval(rate)
            for state, rate in zip(states, rates, strict=True)
            if state is not None
        ),
        default=at,
    )
    return Taken(False, tuple(states), _up(Fraction(max(retry, at), NS)))


def charged(
    states: Sequence[int | None], steps: Sequence[int], bursts: Sequence[int], cost: int, at: int, lead: int = 0
) -> tuple[int, ...] | None:
    """GCRA's rule in whole ns: every window's state once `cost` is taken at the instant `at`, all or
    none (None: some window refuses it).

    A window of emission interval `step` and burst `burst` allows the cost while its TAT,
    counted from at least `at + lead`, ends the charge within `at + burst * step`, and
    moves to `max(TAT, at + lead) + cost * step`. A start charged now has `lead` 0: the
    check is `TAT <= at + (burst - cost) * step` (so never a cost above its burst). A run
    taken ahead of the worker's free slots starts anywhere in `[at, at + lead]`, so its
    charge is counted from the end of its lead (`ahead_lead`): a window of real starts
    that begins with it finds the state past its start, and the lead costs the burst,
    not the sustained rate (the state moves *to* `at + lead`, never *by* it).
    `take` answers with it; a claim calls it directly with the intervals and bursts
    of a shape's windows worked out once (`domain.admission.RateWindows`).
    """
    after = []
    for state, step, burst in zip(states, steps, bursts, strict=True):
        start = at + lead if state is None or state < at + lead else state
        if cost > burst or start + cost * step > at + burst * step:
            return None
        after.append(start + cost * step)
    return tuple(after)


def ahead_lead(steps: Sequence[int], bursts: Sequence[int]) -> int:
    """The lead (ns) a run taken ahead is charged with under these windows: half the smallest
    burst's span, at most LEAD_CAP_NS (0: a burst of 1, no run goes ahead).

    The lead is the time the worker has to start the run; the other half of the
    burst is what the runs taken ahead use up beyond it (`charged`), so a claim takes
    ahead only what a window with ample room (`roomy`) can give without binding.
    """
    return min((min(LEAD_CAP_NS, burst // 2 * step) for step, burst in zip(steps, bursts, strict=True)), default=0)


def roomy(states: Sequence[int | None], steps: Sequence[int], bursts: Sequence[int], at: int) -> bool:
    """Whether every window has used at most half its burst at `at`: only then does a claim take
    a rated run ahead (or recharge its lead), so that a rate that binds is charged as if none ever
    went ahead."""
    for state, step, burst in zip(states, steps, bursts, strict=True):
        if state is not None and state > at + burst // 2 * step:
            return False
    return True


@dataclass(frozen=True)
class Held:
    """A start a rate refuses now: the window that holds it longest, and when every window allows it."""

    rate: Rate
    retry_at: float | None  # database clock; None: the cost exceeds a window's burst and never fits


def held(states: Sequence[int | None], rates: Sequence[Rate], cost: int, now: float) -> Held | None:
    """Whether `take` would refuse `cost` at `now` and why (None: allowed, nothing taken).

    The one reading of a refusal, for the claim's block reason and for every
    surface that says why a queued run waits (`domain.blocking`).
    """
    taken = take(states, rates, cost, now)
    if taken.allowed:
        return None

    def alone(index: int) -> float:
        return take([states[index]], (rates[index],), cost, now).retry_at

    binding = rates[max(range(len(rates)), key=alone)]
    return Held(binding, None if taken.retry_at == math.inf else taken.retry_at)


@dataclass(frozen=True)
class RateStates:
    """The stored rate states (GCRA's TAT in ns per (rate scope, window in ns)) read at `now`, the
    database's time of the read: what decides whether a rated run may start now."""

    states: Mapping[tuple[str, int], int] = field(default_factory=dict)
    now: float = 0.0

    def held(self, scope: str, rates: Sequence[Rate], cost: int) -> Held | None:
        """Whether a start of `cost` charged to `scope` is refused now (None: allowed, or no rate)."""
        if not rates:
            return None
        return held([self.states.get((scope, window_key(rate))) for rate in rates], rates, cost, self.now)

    def refuses(self, scope: str, rates: Sequence[Rate], cost: int) -> bool:
        """Whether a start of `cost` charged to `scope` is refused now: `held` without the why,
        in whole ns (a claim's read asks it of every live state, for the partitions to step over)."""
        states = [self.states.get((scope, window_key(rate))) for rate in rates]
        steps = [interval(rate) for rate in rates]
        return (
            bool(rates)
            and charged(states, steps, [rate.allowed_burst for rate in rates], cost, to_ns(self.now)) is None
        )


class Charge(NamedTuple):
    """What one start took of one rate window: the window's state before and after it, its cost,
    and the window's emission interval then (what one cost unit is worth, in ns).

    Stored with the run's attempt (`rate_charge`), so that a claim undone before
    the start can give it back and `report_cost` can correct it. A named tuple: a
    claim makes one per charged window of every run it admits, and its stored form
    is its fields in order (`json.dumps` writes it as that list).
    """

    scope: str
    window: int  # the window's length in ns (`window_key`)
    before: int | None  # the state before the charge (None: never charged, or not after the charge's instant)
    after: int  # the state the charge left (GCRA's TAT in ns)
    cost: int = 1
    step: int | None = None  # `interval(rate)` when charged (None: stored before weights, not corrected)
    at: int | None = None  # the instant it was charged at, in ns of the database's clock (`to_ns(now)`)

    def to_json(self) -> list[object]:
        return list(self)

    @classmethod
    def from_json(cls, item: Sequence[object]) -> Charge:
        """A stored charge; one of four items is from before weights, when every cost was 1."""
        scope, window, before, after, *rest = item
        if not (isinstance(scope, str) and isinstance(window, int) and isinstance(after, int)):
            raise ValueError(f"a stored rate charge must be [scope, window, before, after, ...], got {item!r}")
        cost, step, at = [*rest, None, None, None][:3]
        return cls(
            scope,
            window,
            before if isinstance(before, int) else None,
            after,
            cost if isinstance(cost, int) else 1,
            step if isinstance(step, int) else None,
            at if isinstance(at, int) else None,
        )


def unspent(charge: Charge, now: float, state: int | None = None, lead: int = 0) -> int:
    """How much of a charge's time (ns) is still ahead of `now`: what giving it back may return.

    A charge moved the window's state from `before` to `after`; the part of that
    span already behind `now` was spent (those tokens would have come back by
    now anyway), the rest is `after - max(before, now)`. Giving back at most that
    leaves the state at or above what it would be had the charge never happened,
    whatever was charged after it (tests/unit/test_rates_model.py checks this
    against a log of every start, with refunds and corrections in any order).

    Where the window's `state` moved past the charge, a run taken ahead may have been
    charged after it, and may start until its lead ends (`charged`): it stands on the
    state being at least that far on, as it would be had the charge given back never
    been. So the give-back then keeps `now + lead` too, the furthest lead a run taken
    ahead on this window may hold (`rate_charger.lead_kept`). A run taken ahead stores
    its charge with `before == after`, so it gives back nothing itself
    (tests/unit/test_rates_ahead_model.py).
    """
    at = to_ns(now)
    keep = at if charge.before is None else max(charge.before, at)
    if lead and state is not None and state > charge.after:
        keep = max(keep, at + lead)
    return max(0, charge.after - keep)


def refund(state: int | None, charge: Charge, now: float, lead: int = 0) -> int | None:
    """A window's state once a charge that never started is given back at `now`.

    Exact when nothing was charged after it (the window is as if it never was);
    otherwise it returns what of the charge is still unspent, never more (`unspent`,
    keeping `lead`).
    """
    return None if state is None else state - unspent(charge, now, state, lead)


def correct(state: int | None, charge: Charge, cost: int, now: float, lead: int = 0) -> tuple[int | None, Charge]:
    """A window's state and the charge once the start's cost is corrected to `cost` at `now`.

    More: the difference is taken at once (the state moves on by it, even past the
    burst: the start already happened, later starts wait for it). Less: the
    difference is given back at once, as far as it is unspent (`unspent`, keeping `lead`). Either
    way the charge records the cost and where it now ends, for a later correction.
    A charge stored without its interval is left as it is.
    """
    if isinstance(cost, bool) or not isinstance(cost, int) or cost < 0:
        raise ValueError(f"a corrected rate cost is a whole number of at least 0, got {cost!r}")
    if state is None or charge.step is None or cost == charge.cost:
        return state, charge
    if cost > charge.cost:
        more = (cost - charge.cost) * charge.step
        return state + more, charge._replace(after=charge.after + more, cost=cost)
    back = min((charge.cost - cost) * charge.step, unspent(charge, now, state, lead))
    return state - back, charge._replace(after=charge.after - back, cost=cost)


def _up(value: Fraction) -> float:
    """The float at or above `value`: a retry time is never earlier than the exact one."""
    result = float(value)
    return math.nextafter(result, math.inf) if Fraction(result) < value else result
