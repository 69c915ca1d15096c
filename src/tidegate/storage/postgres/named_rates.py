"""PostgreSQL named rates: their windows, declared by the code or overridden live.

A rate's windows are changed under the lock of its scope row (`rate:@NAME`),
which every step claim paying the rate takes before it reads them (see
`steps.py`), so no claim decides on windows changed meanwhile. Which of the
code's declaration and a live override is in force is `domain.named_rates`'s rule.
"""

from __future__ import annotations

from collections.abc import Callable

from tidegate.domain.named_rates import NamedRate, RateRow
from tidegate.storage import port
from tidegate.storage.postgres.settings import SettingChanges
from tidegate.storage.shared import rate_rows
from tidegate.storage.shared.rate_rows import NamedRateReads, NamedRateSettingVerbs


class NamedRates(NamedRateSettingVerbs, SettingChanges, NamedRateReads, port.NamedRateVerbs):
    """The named-rate verbs of the storage port: each change is the dialect's one setting transaction."""

    def _change(self, name: str, step: Callable[[RateRow], RateRow], live: bool) -> NamedRate | None:
        return self._change_setting(rate_rows.NAMED_RATE, name, step, live)
