"""Named rates as live-limit targets: `rate:@NAME@PER` (`@PER` left out for a rate of one window).

A named rate (`App.set_rate_limit`) is stored as one setting, the code's windows and a live
override of them (`domain.named_rates`), not in the table of limit overrides: the steps that
pay it read it with their pool slots. So `tidegate limits set|reset`, `PUT|DELETE
/api/v1/limits` and the dashboard's `/limits` change one of its windows through the
named-rate verbs (`engine.operators.rate_config`), the very write of `tidegate rates set`:
one override per rate, versioned and audited there (`LimitChanged` on `rate:@NAME`).

A reset drops the rate's whole override (every window), as `tidegate rates reset` does: a
named rate is overridden as one.
"""

from __future__ import annotations

from dataclasses import dataclass

from tidegate.domain.errors import ConfigurationError
from tidegate.domain.model import LimitChange
from tidegate.domain.named_rates import (
    NamedRate,
    code_window,
    named_rate_target_name,
    target_window,
    window_target,
    with_window_limit,
)
from tidegate.domain.rates import Rate, window_key
from tidegate.engine.operators import rate_config
from tidegate.storage.port import Store


@dataclass(frozen=True)
class NamedWindow:
    """The window of a named rate a target names, as it is now."""

    rate: NamedRate
    window: Rate

    @property
    def target(self) -> str:
        """The target normalised: `rate:@NAME@PER`."""
        return window_target(self.rate, self.window)

    @property
    def code_limit(self) -> int | None:
        coded = code_window(self.rate, self.window)
        return None if coded is None else coded.limit


def is_named(target: str) -> bool:
    """Whether `target` names a named rate's window (`rate:@...`)."""
    return named_rate_target_name(target) is not None


def find(store: Store, target: str) -> NamedWindow:
    """The window `target` names, or a ConfigurationError naming what is wrong."""
    name = named_rate_target_name(target)
    rate = next((each for each in rate_config.list_rates(store) if each.name == name), None)
    if rate is None:
        names = ", ".join(each.name for each in rate_config.list_rates(store)) or "none"
        raise ConfigurationError(f"limit target {target!r}: no named rate {name!r} is declared (named rates: {names})")
    return NamedWindow(rate, target_window(target, rate))


def set_window(store: Store, target: str, limit: int) -> LimitChange:
    """A live override of the named window's limit (the rate's other windows as they are in force)."""
    found = find(store, target)
    windows = list(with_window_limit(found.rate, found.window, limit))
    after = rate_config.change_rate_limit(store, found.rate.name, windows)
    return LimitChange(found.target, found.window.limit, limit, after.version)


def reset(store: Store, target: str) -> list[LimitChange]:
    """Drop the rate's live override: one change per window it had in force (the one `target`
    names first); none when the rate has no override."""
    found = find(store, target)
    if found.rate.source != "override":
        return []
    after = rate_config.reset_rate_limit(store, found.rate.name)
    back = {} if after is None else {window_key(window): window.limit for window in after.rates}
    windows = sorted(found.rate.rates, key=lambda window: window != found.window)
    version = found.rate.version + 1 if after is None else after.version
    return [
        LimitChange(window_target(found.rate, window), window.limit, back.get(window_key(window)), version)
        for window in windows
    ]


def overridden(store: Store) -> list[NamedRate]:
    """The named rates a live override is in force on."""
    return [rate for rate in rate_config.list_rates(store) if rate.source == "override"]
