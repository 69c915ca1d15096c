"""A run's stored rate charge (`rate_charge`), read back to give it back or to correct it.

The claim stores, with each attempt it charged, what every window of its rate
took (`domain.rates.Charge`, as JSON). A claim undone before the run starts (a
hand-back) gives it back; `report_cost` corrects it while the attempt runs. The
adapters lock and read the windows' states in their own transaction and write
them (`Windows`); what is given back or corrected, and whether that wakes
anyone, is decided once here with `domain.rates`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import NamedTuple

from tidegate.domain.rate_charger import lead_kept
from tidegate.domain.rates import Charge, correct, refund
from tidegate.storage.shared import wakes

Key = tuple[str, int]  # (rate scope, window in ns)
# a run's (or a step's) `rate_charge` column: JSON text, decoded, or its `Charge`s themselves
Stored = str | Sequence[Sequence[object]] | None


class Windows(NamedTuple):
    """A dialect's way to the windows' states inside the transaction it holds."""

    read: Callable[[list[Key]], tuple[dict[Key, int], float]]  # locked in key order, and the time to judge at
    write: Callable[[dict[Key, int]], None]


def give_back(windows: Windows, charges: Iterable[Stored]) -> None:
    """Give the stored charges of runs undone before they started back to their windows (and a
    step's, released before it started: the same rule)."""
    taken = [charge for stored_charge in charges for charge in charges_of(stored_charge)]
    states, now = windows.read(keys_of(taken))
    windows.write(refunded(states, taken, now))


def correct_charge(windows: Windows, stored_charge: Stored, cost: int) -> str | None:
    """The running attempt's stored charge corrected to `cost`, its windows written; the verb's
    wake-up is owed only if tokens were given back (a lower cost)."""
    charges = charges_of(stored_charge)
    states, now = windows.read(keys_of(charges))
    new_states, new_charges = corrected(states, charges, cost, now)
    windows.write(new_states)
    wakes.only_if(any(tat < states[key] for key, tat in new_states.items()))
    return stored(new_charges)


def charges_of(stored: Stored) -> list[Charge]:
    """The charges stored on a run (its `rate_charge`, JSON text or already decoded); none when NULL."""
    if stored is None:
        return []
    items = json.loads(stored) if isinstance(stored, str) else stored
    return [Charge.from_json(item) for item in items]


def stored(charges: Sequence[Charge]) -> str | None:
    """The column's value for `charges` (NULL when nothing is charged)."""
    return json.dumps([charge.to_json() for charge in charges], separators=(",", ":")) if charges else None


def keys_of(charges: Iterable[Charge]) -> list[Key]:
    """The windows the charges touch, each once, in key order: the order their states are locked in."""
    return sorted({(charge.scope, charge.window) for charge in charges})


def refunded(states: Mapping[Key, int], charges: Iterable[Charge], now: float) -> dict[Key, int]:
    """The states of the windows `charges` touch once each is given back at `now`, in turn."""
    result: dict[Key, int] = {}
    for charge in charges:
        key = (charge.scope, charge.window)
        state = refund(result.get(key, states.get(key)), charge, now, lead_kept(charge.scope))
        if state is not None:
            result[key] = state
    return result


def corrected(
    states: Mapping[Key, int], charges: Sequence[Charge], cost: int, now: float
) -> tuple[dict[Key, int], list[Charge]]:
    """The states of the windows `charges` touch and the charges once the running attempt's cost is
    corrected to `cost` at `now`."""
    result: dict[Key, int] = {}
    changed: list[Charge] = []
    for charge in charges:
        key = (charge.scope, charge.window)
        state, charge_now = correct(states.get(key), charge, cost, now, lead_kept(charge.scope))
        if state is not None:
            result[key] = state
        changed.append(charge_now)
    return result, changed
