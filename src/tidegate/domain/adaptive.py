"""Adaptive limits: a queue's concurrency limit that follows its downstream's health (AIMD).

A queue (each partition on its own) declared `adaptive=Adaptive(min=...)` runs
under an *effective* limit between `min` and its declared limit. When its runs
report overload (`raise Snooze(..., overloaded=True)`, or an exception of a
type in `overloaded_by`) the limit is multiplied by `decrease`; after `after`
successes in a row it grows by `increase`, counting only successes that ended
while the limit was in use (the runs in flight had reached it: a limit nobody
fills says nothing about the room above it, as TCP grows only a window it
fills). Multiplicative decrease, additive increase: the rule TCP uses to share
a link, and for the same reason: it converges to the capacity the downstream
really has and backs off fast.

One decrease per generation: an overload reported by an attempt claimed
before the last decrease says nothing about the lowered limit (it was admitted
under the old one), so it is ignored; without this, the runs in flight when
the downstream first says "too many" would cut the limit once each, down to
`min`. (An increase does not start a generation: an overload of a run claimed
just before it still says the downstream was full.)

The effective limit is stored (one row per target) and read into the rules
like a live limit (`Rules.queue_limit`: a live override wins, then the
effective limit, then the code), so every claim applies it exactly; each
change moves the rules version and is audited as a `LimitChanged` with
source `adaptive`. This module is the pure rule; the stores apply it in the
transaction that records the outcomes.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from tidegate.domain.errors import ConfigurationError
from tidegate.domain.integers import STORED_INT_MAX

OVERLOADED = "overloaded"  # the reason of a decrease
RECOVERED = "recovered"  # the reason of an increase
SOURCE = "adaptive"  # the LimitChanged events' source


def _whole(field_name: str, value: object, minimum: int, maximum: int = STORED_INT_MAX) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        raise ConfigurationError(
            f"Adaptive.{field_name} must be a whole number from {minimum} to {maximum}, got {value!r}"
        )
    return value


@dataclass(frozen=True)
class Adaptive:
    """How a queue's concurrency limit adapts: within [min, max or the declared limit], times `decrease`
    on overload, plus `increase` after `after` successes in a row. `overloaded_by`: exception types
    that count as an overload when a run of the queue raises them (kept in code, not stored)."""

    min: int = 1
    max: int | None = None
    decrease: float = 0.75
    increase: int = 1
    after: int = 10
    overloaded_by: tuple[type[BaseException], ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        _whole("min", self.min, 1)
        if self.max is not None:
            _whole("max", self.max, 1)
            if self.max < self.min:
                raise ConfigurationError(f"Adaptive.max ({self.max}) is below Adaptive.min ({self.min})")
        decrease = self.decrease
        if isinstance(decrease, bool) or not isinstance(decrease, (int, float)) or not 0 < decrease < 1:
            raise ConfigurationError(
                f"Adaptive.decrease must be a number between 0 and 1 (exclusive), got {decrease!r}"
            )
        _whole("increase", self.increase, 1)
        _whole("after", self.after, 1)
        exceptions = self.overloaded_by
        if isinstance(exceptions, type):
            exceptions = (exceptions,)
        if not isinstance(exceptions, (tuple, list)) or not all(
            isinstance(kind, type) and issubclass(kind, BaseException) for kind in exceptions
        ):
            raise ConfigurationError(f"Adaptive.overloaded_by must be exception types, got {self.overloaded_by!r}")
        object.__setattr__(self, "overloaded_by", tuple(exceptions))

    def ceiling(self, declared: int | None, what: str) -> int:
        """The top of the range: `max`, else the declared limit (the lower of the two when both)."""
        if declared is None and self.max is None:
            raise ConfigurationError(f"{what}: an adaptive limit needs a declared limit or Adaptive(max=...)")
        top = min(limit for limit in (declared, self.max) if limit is not None)
        if self.min > top:
            raise ConfigurationError(f"{what}: Adaptive.min ({self.min}) is above the limit it adapts ({top})")
        return top

    def to_json(self) -> dict[str, Any]:
        return {
            "min": self.min,
            "max": self.max,
            "decrease": self.decrease,
            "increase": self.increase,
            "after": self.after,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Adaptive:
        return cls(data["min"], data.get("max"), data["decrease"], data["increase"], data["after"])


class Signal(NamedTuple):
    """What one ended attempt says about the downstream: overloaded, else a success; `admitted_at`
    (when it was claimed, store seconds; None when not known) tells an attempt admitted under an
    older limit."""

    overloaded: bool
    admitted_at: float | None


@dataclass(frozen=True)
class AdaptiveState:
    """A target's effective limit as stored: the limit, successes since its last change, when it was
    last lowered (store seconds) and why it last changed (None: never changed)."""

    limit: int
    successes: int = 0
    lowered_at: float = 0.0
    reason: str | None = None


@dataclass(frozen=True)
class Change:
    """A move of the effective limit (audited as a LimitChanged)."""

    old: int
    new: int
    reason: str


def adapt(
    state: AdaptiveState | None,
    adaptive: Adaptive,
    ceiling: int,
    signals: Iterable[Signal],
    now: float,
    busy: int,
) -> tuple[AdaptiveState, list[Change]]:
    """The state after `signals` (in the order they ended), and each change of the limit they made.

    `busy`: the target's runs in flight just before these ended (them included); a success counts
    toward an increase only when they filled the limit then. A target never seen starts at its
    ceiling. The limit always ends within [min, ceiling], even when the ceiling moved below a stored
    limit (the code lowered it).
    """
    current = state or AdaptiveState(ceiling)
    changes: list[Change] = []
    bounded = max(adaptive.min, min(current.limit, ceiling))
    if bounded != current.limit:
        current = replace(current, limit=bounded)
    for signal in signals:
        before = current.limit
        if signal.overloaded:
            if signal.admitted_at is not None and signal.admitted_at < current.lowered_at:
                continue  # admitted before the last decrease: already answered
            lowered = max(adaptive.min, min(before - 1, math.floor(before * adaptive.decrease)))
            current = AdaptiveState(lowered, 0, now, OVERLOADED) if lowered != before else replace(current, successes=0)
            if lowered != before:
                changes.append(Change(before, lowered, OVERLOADED))
            continue
        if busy < before:
            continue  # the limit was not in use: no sign there is room above it
        successes = current.successes + 1
        if successes >= adaptive.after and before < ceiling:
            raised = min(ceiling, before + adaptive.increase)
            current = AdaptiveState(raised, 0, current.lowered_at, RECOVERED)
            changes.append(Change(before, raised, RECOVERED))
        else:
            current = replace(current, successes=min(successes, adaptive.after))
    return current, changes


def describe(state: AdaptiveState | None, ceiling: int) -> str:
    """How surfaces word an adaptive limit: 'adaptive 4 of 20 (overloaded)'."""
    if state is None:
        return f"adaptive {ceiling} of {ceiling}"
    why = f" ({state.reason})" if state.reason else ""
    return f"adaptive {min(state.limit, ceiling)} of {ceiling}{why}"


def by_target(rows: Sequence[tuple[str, int, int, float, str | None]]) -> dict[str, AdaptiveState]:
    """Stored rows (target, limit, successes, lowered_at, reason) as states by target."""
    return {
        target: AdaptiveState(limit, successes, lowered_at, reason)
        for target, limit, successes, lowered_at, reason in rows
    }
