"""A named rate's stored row to and from the pure rules (`domain.named_rates`), shared by both adapters.

Each adapter reads the row under its own lock (PostgreSQL: the rate's scope
row, which every step claim paying the rate also locks; SQLite: the single
writer), asks the rules for the next row and stores it with these
parameters, so a declaration, an override and a reset are written one way
on both dialects, and `named_rates` is read one way.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from tidegate.domain import named_rates
from tidegate.domain.named_rates import (
    NamedRate,
    RateRow,
    Windows,
    named_rate_scope,
    windows_from_json,
    windows_json,
)
from tidegate.storage.shared.reads import Dialect
from tidegate.storage.shared.settings import SettingKind


def rate_row(row: Sequence[Any] | None) -> RateRow:
    """A `named_rate_row` result (declared, override, version); None: no row."""
    if row is None:
        return RateRow()
    declared, override, version = row
    return RateRow(windows_from_json(declared), windows_from_json(override), version)


def save_params(name: str, row: RateRow) -> dict[str, Any]:
    """`save_named_rate`'s parameters (a row with nothing in force is deleted instead)."""
    in_force = row.in_force
    assert in_force is not None, "a rate with neither a declaration nor an override is deleted, not saved"
    return {
        "name": name,
        "rates": windows_json(in_force),
        "declared": windows_json(row.declared),
        "override": windows_json(row.override),
        "version": row.version,
    }


def named_rate(name: str, row: RateRow, updated_at: datetime | None, waiting: int = 0) -> NamedRate | None:
    """What a change leaves in force (None: the rate is no longer declared)."""
    in_force = row.in_force
    if in_force is None:
        return None
    return NamedRate(name, in_force, row.source, row.declared, updated_at, waiting, row.version)


NAMED_RATE: SettingKind[RateRow, NamedRate] = SettingKind(
    scope=named_rate_scope,
    row_query="named_rate_row",
    save_query="save_named_rate",
    delete_query="delete_named_rate",
    row=rate_row,
    save_params=save_params,
    event=lambda name, before, after, live: named_rates.change_event(name, before, after, live=live),
    shown=named_rate,
)


class NamedRateSettingVerbs:
    """The named-rate verbs as steps of the one rule; each adapter applies a step to the stored
    row in its own transaction (`_change`), with its audit and its wake-up."""

    def _change(self, name: str, step: Callable[[RateRow], RateRow], live: bool) -> NamedRate | None:
        raise NotImplementedError

    def declare_named_rate(self, name: str, windows: Windows) -> NamedRate:
        rate = self._change(name, lambda row: named_rates.declare(row, windows), False)
        assert rate is not None  # a declaration always leaves windows in force
        return rate

    def set_named_rate(self, name: str, windows: Windows) -> NamedRate:
        rate = self._change(name, lambda row: named_rates.override(row, windows), True)
        assert rate is not None  # an override is in force
        return rate

    def reset_named_rate(self, name: str) -> NamedRate | None:
        return self._change(name, named_rates.reset, True)


class NamedRateReads:
    """The read of `port.NamedRateVerbs`: every declared rate with the steps waiting for it."""

    def named_rates(self: Dialect) -> list[NamedRate]:
        found = []
        for name, _, declared, override, version, updated_at, waiting in self._tuples("named_rates"):
            row = RateRow(windows_from_json(declared), windows_from_json(override), version)
            rate = named_rate(name, row, self._to_time(updated_at), waiting)
            if rate is not None:
                found.append(rate)
        return found
