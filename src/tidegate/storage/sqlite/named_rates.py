"""SQLite named rates: their windows, declared by the code or overridden live.

Which of the two is in force is `domain.named_rates`'s rule, read and written
in one write transaction; the single writer keeps every step claim that pays
the rate out meanwhile.
"""

from __future__ import annotations

from collections.abc import Callable

from tidegate.domain import named_rates
from tidegate.domain.named_rates import NamedRate, RateRow
from tidegate.storage import port
from tidegate.storage.shared import rate_rows, wakes
from tidegate.storage.shared.rate_rows import NamedRateReads, NamedRateSettingVerbs
from tidegate.storage.sqlite.database import Aggregate
from tidegate.storage.sqlite.payloads import event_row, to_time


class NamedRates(NamedRateSettingVerbs, Aggregate, NamedRateReads, port.NamedRateVerbs):
    """The named-rate verbs of the storage port."""

    def _change(self, name: str, step: Callable[[RateRow], RateRow], live: bool) -> NamedRate | None:
        """Read the row, apply the rule, store the result and its audit, wake waiting steps."""
        at = None
        with self._write() as (connection, now):
            before = rate_rows.rate_row(connection.execute(self._q("named_rate_row"), {"name": name}).fetchone())
            after = step(before)
            if after.in_force is None:
                connection.execute(self._q("delete_named_rate"), {"name": name})
            else:
                params = {**rate_rows.save_params(name, after), "now": now}
                at = to_time(connection.execute(self._q("save_named_rate"), params).fetchone()[0])
            event = named_rates.change_event(name, before, after, live=live)
            if event is not None:
                connection.execute(self._q("insert_event"), event_row(None, event, now))
        wakes.only_if(event is not None)  # a raised rate lets waiting steps in sooner
        return rate_rows.named_rate(name, after, at)
