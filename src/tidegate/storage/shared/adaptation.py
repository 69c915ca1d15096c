"""Adaptive limits as both stores apply them, in the transaction that records the outcomes.

Each adapter hands over what its cycle applied (each outcome's queue,
partition, signal and claim time, read back from the rows it updated and the
holders it freed), reads
the stored states of the targets concerned (locked, on PostgreSQL), and
writes back what `domain.adaptive.adapt` answers: the states, and for every
move of a limit a `LimitChanged` event and a new rules version (so that every
claim after the commit, and every cached plan, uses the new limit). Nothing
here runs for a store without adaptive queues: the rules say so first.

An adaptive rate window (`Rate(..., adaptive=Adaptive(...))`) is a target of its own
(`rate:QUEUE[/PARTITION]@PER`, `domain.live_rates`): the windows an attempt was charged
come back with its outcome (its stored `rate_charge`), each with the instant it was
charged at, which is when the attempt was admitted under that window's limit.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from tidegate.domain import events as history
from tidegate.domain.adaptive import Adaptive, AdaptiveState, Signal, adapt
from tidegate.domain.live_rates import rate_target
from tidegate.domain.model import Outcome, OutcomeKind
from tidegate.domain.rates import NS, Charge, window_key
from tidegate.domain.scopes import Rules, queue_scope


class Ended(NamedTuple):
    """An applied outcome as adaptation needs it."""

    queue: str
    partition: str
    signal: Signal | None  # None: it says nothing of the downstream (a plain failure, a cancel, a plain snooze)
    charges: tuple[Charge, ...] = ()  # the rate windows its attempt was charged (an adaptive one adapts)


def signal_of(outcome: Outcome, admitted_at: float | None) -> Signal | None:
    """Overloaded when the worker said so (`Snooze(overloaded=True)`, an `overloaded_by` exception);
    a completion is a success; anything else is neither. `admitted_at`: when the attempt was
    claimed (its run holders' `claimed_at`, read as the outcome frees them)."""
    if outcome.overloaded:
        return Signal(True, admitted_at)
    if outcome.kind is OutcomeKind.COMPLETED:
        return Signal(False, admitted_at)
    return None


def ended(outcomes: Iterable[Outcome], applied: Iterable[Sequence[Any]]) -> list[Ended]:
    """The applied outcomes, each row (run id, attempt, queue, partition, claim time, rate charge as
    stored), as adaptation reads them."""
    by_fence = {(outcome.run_id, outcome.attempt): outcome for outcome in outcomes}
    return [
        Ended(queue, partition, signal_of(by_fence[(run_id, attempt)], claimed_at), _charges(stored))
        for run_id, attempt, queue, partition, claimed_at, stored in applied
    ]


def _charges(stored: Any) -> tuple[Charge, ...]:
    items = json.loads(stored) if isinstance(stored, str) else (stored or [])
    return tuple(Charge.from_json(item) for item in items)


def has_adaptive(rules: Rules) -> bool:
    """Whether a queue's concurrency or any window of its rate adapts."""
    return any(
        config.adaptive is not None or any(rate.adaptive is not None for rate in config.rate)
        for config in rules.queues.values()
    )


@dataclass
class Work:
    """One target's signals, with its declaration and the top of its range."""

    adaptive: Adaptive
    ceiling: int
    signals: list[Signal] = field(default_factory=list)
    ended: int = 0  # its attempts these outcomes ended (each held a slot of it until now)
    filled: bool | None = None  # a rate window: whether a start of these was charged while it was in use


def targets(rules: Rules, ended: Iterable[Ended]) -> dict[str, Work]:
    """The adaptive targets these outcomes concern, each with its signals in order."""
    found: dict[str, Work] = {}
    for queue, partition, signal, _ in ended:
        config = rules.queues.get(queue)
        if signal is None or config is None or config.adaptive is None:
            continue
        target = queue_scope(queue, partition)
        work = found.get(target)
        if work is None:
            declared = Rules.declared_queue_limit(config, partition)
            work = found[target] = Work(config.adaptive, config.adaptive.ceiling(declared, f"queue {queue}"))
        work.signals.append(signal)
    for queue, partition, *_ in ended:
        work = found.get(queue_scope(queue, partition))
        if work is not None:
            work.ended += 1
    for item in ended:
        if item.signal is not None:
            _rate_targets(rules, item.signal, item.charges, found)
    return found


def _rate_targets(rules: Rules, signal: Signal, charges: Iterable[Charge], found: dict[str, Work]) -> None:
    """The adaptive rate windows one outcome's attempt was charged, each a target of its own
    (`rate:QUEUE[/PARTITION]@PER`) with the signal admitted at its charge's instant.

    A window counts as in use when the charge found its state drained less than one emission
    interval before the instant (`in_use`): the runs came at the rate's pace, so a success then
    says the rate had room; a trickle that never reaches the rate says nothing of the room above it."""
    for charge in charges:
        rate = next(
            (each for each in rules.declared_rate_windows(charge.scope) if window_key(each) == charge.window), None
        )
        ceiling = None if rate is None else rate.adaptive_ceiling
        if rate is None or rate.adaptive is None or ceiling is None:
            continue
        target = rate_target(charge.scope, rate)
        work = found.get(target)
        if work is None:
            work = found[target] = Work(rate.adaptive, ceiling, filled=False)
        admitted = signal.admitted_at if charge.at is None else charge.at / NS
        work.signals.append(Signal(signal.overloaded, admitted))
        work.filled = work.filled or in_use(charge)


def in_use(charge: Charge) -> bool:
    """Whether a start was charged while its window was in use: the state it found (GCRA's TAT)
    lay less than one emission interval before its instant. A backlog held back by the rate is
    admitted as soon as the state allows (with burst 1 exactly when it reaches the instant), a
    trickle slower than the rate finds the state long drained."""
    if charge.before is None or charge.at is None or charge.step is None:
        return False
    return charge.before + charge.step > charge.at


@dataclass
class Adapted:
    states: dict[str, AdaptiveState]  # every target's new state (successes move without a change)
    events: list[history.Event]  # one LimitChanged per move, in order

    @property
    def changed(self) -> bool:
        return bool(self.events)


def adapted(
    work: Mapping[str, Work], stored: Mapping[str, AdaptiveState], usage: Mapping[str, int], now: float
) -> Adapted:
    """The targets' new states and events; `usage`: the slots of each held now, after these ends."""
    states: dict[str, AdaptiveState] = {}
    events: list[history.Event] = []
    for target in sorted(work):
        item = work[target]
        busy = usage.get(target, 0) + item.ended if item.filled is None else (item.ceiling if item.filled else 0)
        state, changes = adapt(stored.get(target), item.adaptive, item.ceiling, item.signals, now, busy)
        states[target] = state
        events.extend(history.adaptive_limit_changed(target, c.old, c.new, c.reason) for c in changes)
    return Adapted(states, events)


def state_rows(states: Mapping[str, AdaptiveState]) -> list[dict[str, object]]:
    """The states as the `save_adaptive_states` statements take them."""
    return [
        {
            "target": target,
            "limit": state.limit,
            "successes": state.successes,
            "lowered_at": state.lowered_at,
            "reason": state.reason,
        }
        for target, state in states.items()
    ]
