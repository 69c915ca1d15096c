"""Named rates for an operator and for the code: validate first, then one write, so bad input
changes nothing.

`App.set_rate_limit` (the code's declaration), `tidegate rates set|reset` and
`PUT|DELETE /api/v1/rates/NAME` (a live override) all come through here, so a
name, a limit, a window or a burst is judged the same way wherever it is given.
"""

from __future__ import annotations

from typing import Any

from tidegate.domain.errors import ConfigurationError, InvalidArgument
from tidegate.domain.named_rates import NamedRate, check_rate_name, rate_windows
from tidegate.domain.rates import Rate
from tidegate.engine.operators.pool_config import InvalidField
from tidegate.storage.port import Store


def _windows(limit: Any, per: Any, burst: Any) -> tuple[Rate, ...]:
    """The windows given, or InvalidField naming the value to fix (`limit`, `per` or `burst`)."""
    try:
        return rate_windows(limit, per, burst)
    except (ConfigurationError, InvalidArgument) as error:
        text = str(error)
        field = next((name for name in ("burst", "per") if text.startswith(f"Rate.{name}")), "limit")
        if "needs per=" in text:
            field = "per"
        raise InvalidField(field, text) from None


def _name(name: Any) -> str:
    try:
        return check_rate_name(name)
    except InvalidArgument as error:
        raise InvalidField("name", str(error)) from None


def declare_rate_limit(store: Store, name: Any, limit: Any, per: Any = None, burst: Any = None) -> NamedRate:
    """The code's windows of the rate `name`: in force unless overridden live."""
    return store.declare_named_rate(_name(name), _windows(limit, per, burst))


def change_rate_limit(store: Store, name: Any, limit: Any, per: Any = None, burst: Any = None) -> NamedRate:
    """A live override of the rate `name`, kept until reset; audited; wakes waiting steps."""
    return store.set_named_rate(_name(name), _windows(limit, per, burst))


def reset_rate_limit(store: Store, name: Any) -> NamedRate | None:
    """Drop the rate's live override: the code's windows again (None: no code value, the rate is gone)."""
    return store.reset_named_rate(_name(name))


def list_rates(store: Store) -> list[NamedRate]:
    """Every declared rate, with its windows, where they come from, and the steps waiting for it."""
    return store.named_rates()


def find_rate(store: Store, name: Any) -> NamedRate | None:
    checked = _name(name)
    return next((rate for rate in store.named_rates() if rate.name == checked), None)
