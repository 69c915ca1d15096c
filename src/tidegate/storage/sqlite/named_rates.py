"""SQLite named rates: their windows, declared by the code or overridden live.

Which of the two is in force is `domain.named_rates`'s rule, read and written
in one write transaction; the single writer keeps every step claim that pays
the rate out meanwhile.
"""

from __future__ import annotations

from collections.abc import Callable

from tidegate.domain.named_rates import NamedRate, RateRow
from tidegate.storage import port
from tidegate.storage.shared import rate_rows
from tidegate.storage.shared.rate_rows import NamedRateReads, NamedRateSettingVerbs
from tidegate.storage.sqlite.settings import SettingChanges


class NamedRates(NamedRateSettingVerbs, SettingChanges, NamedRateReads, port.NamedRateVerbs):
    """The named-rate verbs of the storage port: each change is the dialect's one setting transaction."""

    def _change(self, name: str, step: Callable[[RateRow], RateRow], live: bool) -> NamedRate | None:
        return self._change_setting(rate_rows.NAMED_RATE, name, step, live)
