"""How each kind of overridable setting (a pool's limit, a named rate's windows) is stored.

Both kinds are one row each of the shape `domain.overridable` rules over, changed the same way:
read the row under the kind's lock, apply the rule's step, store the result (or delete a row
with nothing in force), audit it, wake the steps waiting for it. Each dialect writes that
transaction once (`_change_setting` of its `settings.py`); a `SettingKind` names what differs
between the kinds: the scope row a PostgreSQL change locks, the queries and the row's codec.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, TypeVar

from tidegate.domain.events import Event
from tidegate.domain.overridable import Overridable

Row = TypeVar("Row", bound=Overridable[Any])
Shown = TypeVar("Shown")


@dataclass(frozen=True)
class SettingKind(Generic[Row, Shown]):
    """What a dialect needs to change one kind of setting."""

    scope: Callable[[str], str]  # the scope row every claim of the setting locks: a change locks it too
    row_query: str  # the stored row (declared, override, version) by name
    save_query: str  # upsert; returns the time it was saved
    delete_query: str
    row: Callable[[Sequence[Any] | None], Row]  # the stored row as the rule's value (None: no row)
    save_params: Callable[[str, Row], dict[str, Any]]
    event: Callable[[str, Row, Row, bool], Event | None]  # the audit of a change (None: nothing moved)
    shown: Callable[[str, Row, datetime | None], Shown | None]  # what the verb answers
