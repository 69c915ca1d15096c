"""Named rates: a rate declared by name, like a pool, and charged by the steps that name it.

`App.set_rate_limit("warehouse_api", 100, per="1s")` declares the code's
windows; a live change (`tidegate rates set`, `PUT /api/v1/rates/NAME`)
overrides them until reset, audited, exactly as for pools
(`domain.pool_settings`), so the rule of which value is in force is written
once more here only for a value that is a tuple of windows.

A step declared `@app.step(rates={"warehouse_api": 1})` pays its cost of
every window in the transaction that takes its pool slots, all or none
(`decide_rates`, read by `storage/shared/slots.py`). The windows' GCRA
states live in `tidegate_rate_states` under the scope `rate:@NAME`: '@'
starts no queue name, so a named rate never shares a state with a queue's
rate (`rate:QUEUE`) or a tag's (`rate:tag:KEY=VALUE`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from tidegate.domain import events as history
from tidegate.domain.errors import ConfigurationError, InvalidArgument, RateCostTooLarge, RateNotFound
from tidegate.domain.integers import check_whole
from tidegate.domain.live_rates import WINDOW_MARK, pick_window, rate_target, relimited
from tidegate.domain.names import check_name
from tidegate.domain.overridable import Overridable
from tidegate.domain.overridable import declare as declare
from tidegate.domain.overridable import override as override
from tidegate.domain.overridable import reset as reset
from tidegate.domain.rates import Charge, Rate, check_rates, interval, take, to_ns, window_key
from tidegate.domain.steps import NAMED_RATE_SCOPE

NAMED_RATE_PREFIX = NAMED_RATE_SCOPE

Windows = tuple[Rate, ...]


def named_rate_scope(name: str) -> str:
    """The scope of a named rate's states: `rate:@NAME`."""
    return NAMED_RATE_PREFIX + name


def named_rate_of(scope: str) -> str | None:
    """The named rate a scope key names, or None for another kind of scope."""
    return scope[len(NAMED_RATE_PREFIX) :] if scope.startswith(NAMED_RATE_PREFIX) else None


def check_rate_name(name: Any) -> str:
    """A named rate's name: the characters a pool's name may have."""
    return check_name("rate", name)


def rate_windows(limit: Any, per: Any = None, burst: Any = None) -> Windows:
    """The windows of `set_rate_limit(name, limit, per=..., burst=...)`: a whole `limit` with its `per`
    (and optional `burst`), or a `Rate` or a list of them (every window must allow a start)."""
    if isinstance(limit, Rate) or (isinstance(limit, Sequence) and not isinstance(limit, (str, bytes))):
        if per is not None or burst is not None:
            raise ConfigurationError("give per= and burst= inside each Rate(...), not beside a list of them")
        windows = check_rates(limit, "rate")
    else:
        if per is None:
            raise ConfigurationError(f"a rate of {limit!r} needs per=, the window's length (like '1s' or '1m')")
        windows = (Rate(limit=limit, per=per, burst=burst),)
    if not windows:
        raise ConfigurationError("a named rate needs at least one window")
    return tuple(sorted(windows, key=window_key))


def check_step_rates(rates: Any) -> dict[str, int]:
    """`@app.step(rates={name: cost})` validated: each name a rate's, each cost a whole number >= 1."""
    if rates is None:
        return {}
    if not isinstance(rates, Mapping):
        raise InvalidArgument(f"rates must be a dict of rate name to cost, got {type(rates).__name__}")
    checked = {check_rate_name(name): check_whole(f"rate {name!r}: cost", cost, 1) for name, cost in rates.items()}
    return dict(sorted(checked.items()))


def windows_json(windows: Windows | None) -> str | None:
    """The stored form of a tuple of windows (None stays NULL)."""
    return None if windows is None else json.dumps([rate.to_json() for rate in windows])


def windows_from_json(text: Any) -> Windows | None:
    """Windows as stored (a JSON text or an already decoded list); None for NULL."""
    if text is None:
        return None
    data = json.loads(text) if isinstance(text, (str, bytes)) else text
    return tuple(Rate.from_json(item) for item in data)


def label(windows: Windows) -> str:
    """'100/1s, 5000/1h': how surfaces show a named rate's windows."""
    return ", ".join(rate.label for rate in windows)


RateRow = Overridable[Windows]  # what is stored of a named rate: the code's windows and a live override


def change_event(name: str, before: RateRow, after: RateRow, *, live: bool) -> history.Event | None:
    """The audit of a change (`LimitChanged` on `rate:@NAME`): always for a live one; for a
    declaration only when the windows in force moved, compared in their stored form (`per="1m"`
    as declared is the 60 seconds read back: every import declares it again)."""
    old, new = before.in_force, after.in_force
    if not live and windows_json(old) == windows_json(new):
        return None
    return history.Event(
        "LimitChanged",
        {
            "target": named_rate_scope(name),
            "old": None if old is None else label(old),
            "new": None if new is None else label(new),
            "source": after.source,
            "reset": live and after.override is None,
        },
    )


@dataclass(frozen=True, slots=True)
class NamedRate:
    """A named rate as `rates list` and `GET /api/v1/rates` show it."""

    name: str
    rates: Windows
    source: str | None
    declared: Windows | None
    updated_at: datetime | None
    waiting: int = 0  # steps of live attempts waiting for it
    version: int = 0  # live changes so far (set and reset), as for a limit override

    def document(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "scope": named_rate_scope(self.name),
            "rates": [{"limit": r.limit, "per": r.seconds, "burst": r.allowed_burst} for r in self.rates],
            "label": label(self.rates),
            "source": self.source,
            "code_rates": None if self.declared is None else label(self.declared),
            "updated_at": self.updated_at,
            "waiting": self.waiting,
        }


def _split_target(target: str) -> tuple[str, str | None] | None:
    """(name, window as typed or None) of a named rate's target; None for any other target. A
    rate's name holds no '@' (`check_rate_name`), so the first one after the prefix ends it."""
    rest = named_rate_of(target)
    if rest is None:
        return None
    name, mark, per = rest.partition(WINDOW_MARK)
    return name, (per if mark else None)


def named_rate_target_name(target: str) -> str | None:
    """The rate a live-limit target names (`rate:@NAME@PER`, `rate:@NAME`), or None for any other target."""
    split = _split_target(target)
    return None if split is None else split[0]


def target_window(target: str, rate: NamedRate) -> Rate:
    """The window in force of `rate` that `target` names: by its length, or the only one."""
    split = _split_target(target)
    per = None if split is None else split[1]
    return pick_window(target, named_rate_scope(rate.name), per, rate.rates)


def window_target(rate: NamedRate, window: Rate) -> str:
    """A window's live-limit target, as `limits list` names it: `rate:@warehouse_api@1s`."""
    return rate_target(named_rate_scope(rate.name), window)


def code_window(rate: NamedRate, window: Rate) -> Rate | None:
    """The code's window of the same length as `window` (None: the code declares none)."""
    return next((each for each in rate.declared or () if window_key(each) == window_key(window)), None)


def with_window_limit(rate: NamedRate, window: Rate, limit: int) -> Windows:
    """The windows in force with `window` given another limit, its burst scaled from the code's
    window of that length (`live_rates.relimited`), so repeated changes never wear the burst down."""
    base = code_window(rate, window) or window
    return tuple(relimited(base, limit) if each == window else each for each in rate.rates)


@dataclass(frozen=True, slots=True)
class RateVerdict:
    """What the named rates of one step's request answered: the charges to store (empty when
    refused), the states they leave, or the rate that holds it back and until when."""

    charges: tuple[Charge, ...] = ()
    states: Mapping[tuple[str, int], int] = field(default_factory=dict)
    held_by: str | None = None  # the rate that holds the start back (the latest to allow it)
    held_label: str = ""
    retry_at: float | None = None  # database clock, seconds: when every window allows it

    @property
    def allowed(self) -> bool:
        return self.held_by is None


def decide_rates(
    costs: Mapping[str, int],
    declared: Mapping[str, Windows],
    states: Mapping[tuple[str, int], int],
    now: float,
) -> RateVerdict:
    """Charge a step's `costs` ({rate name: cost}) to every window of every rate at `now`, all or none.

    `declared` is the windows in force by name, `states` the stored GCRA states by (scope, window),
    read in the transaction that will write the answer. Raises RateNotFound for a name not declared
    and RateCostTooLarge for a cost above a window's burst (no wait could let either start).
    """
    charges: list[Charge] = []
    after: dict[tuple[str, int], int] = {}
    latest: tuple[float, str, str] | None = None
    for name, cost in sorted(costs.items()):
        windows = declared.get(name)
        if windows is None:
            raise RateNotFound(name)
        for rate in windows:
            if cost > rate.allowed_burst:
                raise RateCostTooLarge(name, cost, rate.allowed_burst)
        scope = named_rate_scope(name)
        keys = [(scope, window_key(rate)) for rate in windows]
        before = [states.get(key) for key in keys]
        taken = take(before, windows, cost, now)
        if not taken.allowed:
            if latest is None or taken.retry_at > latest[0]:
                latest = (taken.retry_at, name, label(windows))
            continue
        for key, rate, old, new in zip(keys, windows, before, taken.states, strict=True):
            assert new is not None  # a window that allowed a charge has a state
            after[key] = new
            charges.append(Charge(scope, key[1], old, new, cost, interval(rate), to_ns(now)))
    if latest is not None:
        return RateVerdict(held_by=latest[1], held_label=latest[2], retry_at=latest[0])
    return RateVerdict(tuple(charges), after)


def refundable(charges: Sequence[Charge], started_at: float | None) -> bool:
    """Whether a step's stored charge is for a start that never happened: its step row was not
    recorded running (`started_at`, database clock, seconds) at or after the charge."""
    if not charges:
        return False
    charged_at = max((charge.at for charge in charges if charge.at is not None), default=None)
    if charged_at is None:
        return False  # no instant to compare with: keep it (a refund may only ever be exact)
    return started_at is None or to_ns(started_at) < charged_at
