"""Adaptive limits as both stores apply them, in the transaction that records the outcomes.

Each adapter hands over what its cycle applied (each outcome's queue,
partition, signal and claim time, read back from the rows it updated and the
holders it freed), reads
the stored states of the targets concerned (locked, on PostgreSQL), and
writes back what `domain.adaptive.adapt` answers: the states, and for every
move of a limit a `LimitChanged` event and a new rules version (so that every
claim after the commit, and every cached plan, uses the new limit). Nothing
here runs for a store without adaptive queues: the rules say so first.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from tidegate.domain import events as history
from tidegate.domain.adaptive import Adaptive, AdaptiveState, Signal, adapt
from tidegate.domain.model import Outcome, OutcomeKind
from tidegate.domain.scopes import Rules, queue_scope


class Ended(NamedTuple):
    """An applied outcome as adaptation needs it."""

    queue: str
    partition: str
    signal: Signal | None  # None: it says nothing of the downstream (a plain failure, a cancel, a plain snooze)


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
    """The applied outcomes, each row (run id, attempt, queue, partition, claim time), as adaptation
    reads them."""
    by_fence = {(outcome.run_id, outcome.attempt): outcome for outcome in outcomes}
    return [
        Ended(queue, partition, signal_of(by_fence[(run_id, attempt)], claimed_at))
        for run_id, attempt, queue, partition, claimed_at in applied
    ]


def has_adaptive(rules: Rules) -> bool:
    return any(config.adaptive is not None for config in rules.queues.values())


@dataclass
class Work:
    """One target's signals, with its declaration and the top of its range."""

    adaptive: Adaptive
    ceiling: int
    signals: list[Signal] = field(default_factory=list)
    ended: int = 0  # its attempts these outcomes ended (each held a slot of it until now)


def targets(rules: Rules, ended: Iterable[Ended]) -> dict[str, Work]:
    """The adaptive targets these outcomes concern, each with its signals in order."""
    found: dict[str, Work] = {}
    for queue, partition, signal in ended:
        config = rules.queues.get(queue)
        if signal is None or config is None or config.adaptive is None:
            continue
        target = queue_scope(queue, partition)
        work = found.get(target)
        if work is None:
            declared = Rules.declared_queue_limit(config, partition)
            work = found[target] = Work(config.adaptive, config.adaptive.ceiling(declared, f"queue {queue}"))
        work.signals.append(signal)
    for queue, partition, _ in ended:
        work = found.get(queue_scope(queue, partition))
        if work is not None:
            work.ended += 1
    return found


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
        busy = usage.get(target, 0) + item.ended
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
