"""PostgreSQL named rates: their windows, declared by the code or overridden live.

A rate's windows are changed under the lock of its scope row (`rate:@NAME`),
which every step claim paying the rate takes before it reads them (see
`steps.py`), so no claim decides on windows changed meanwhile. Which of the
code's declaration and a live override is in force is `domain.named_rates`'s rule.
"""

from __future__ import annotations

from collections.abc import Callable

from tidegate.domain import named_rates
from tidegate.domain.named_rates import NamedRate, RateRow, named_rate_scope
from tidegate.storage import port
from tidegate.storage.postgres.database import Aggregate
from tidegate.storage.postgres.payloads import event_params, to_time
from tidegate.storage.postgres.pipeline import transaction
from tidegate.storage.postgres.steps import READ_COMMITTED
from tidegate.storage.shared import rate_rows, wakes
from tidegate.storage.shared.rate_rows import NamedRateReads, NamedRateSettingVerbs


class NamedRates(NamedRateSettingVerbs, Aggregate, NamedRateReads, port.NamedRateVerbs):
    """The named-rate verbs of the storage port."""

    def _change(self, name: str, step: Callable[[RateRow], RateRow], live: bool) -> NamedRate | None:
        """Read the row, apply the rule, store the result and its audit, wake waiting steps."""
        at = None
        with self._connection() as connection, transaction(connection, READ_COMMITTED):
            self._lock_scopes(connection, [named_rate_scope(name)])
            before = rate_rows.rate_row(connection.execute(self._q("named_rate_row"), {"name": name}).fetchone())
            after = step(before)
            if after.in_force is None:
                connection.execute(self._q("delete_named_rate"), {"name": name})
            else:
                saved = connection.execute(self._q("save_named_rate"), rate_rows.save_params(name, after)).fetchone()
                at = None if saved is None else to_time(saved[0])
            event = named_rates.change_event(name, before, after, live=live)
            if event is not None:
                connection.execute(self._q("insert_event"), event_params(None, event))
            wakes.only_if(event is not None)  # a raised rate lets waiting steps in sooner
        return rate_rows.named_rate(name, after, at)
