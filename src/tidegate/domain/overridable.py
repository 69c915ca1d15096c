"""A setting the code declares and a live change overrides: which value is in force.

Pools and named rates behave like every other limit: the code's declaration (run on every
import) is the default, and a live change is an override that persists, wins over the code and
is audited until it is reset. Both are stored as one row of this shape, so the rule of which
value is in force exists once.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Generic, TypeVar

CODE = "code"
OVERRIDE = "override"

Value = TypeVar("Value")


@dataclass(frozen=True)  # no slots: a slotted generic dataclass breaks `replace` on Python 3.11
class Overridable(Generic[Value]):
    """The code's declaration and a live override, either may be absent; `version` counts the
    live changes (set and reset), as for limit overrides."""

    declared: Value | None = None
    override: Value | None = None
    version: int = 0

    @property
    def in_force(self) -> Value | None:
        """The override wins until reset; without either nothing is configured."""
        return self.override if self.override is not None else self.declared

    @property
    def source(self) -> str | None:
        """Where the value in force comes from: 'override', 'code', or None (nothing configured)."""
        if self.override is not None:
            return OVERRIDE
        return CODE if self.declared is not None else None


def declare(row: Overridable[Value], value: Value) -> Overridable[Value]:
    """The code's value: kept as the default, in force only while nobody overrides it."""
    return replace(row, declared=value)


def override(row: Overridable[Value], value: Value) -> Overridable[Value]:
    """A live change: in force until reset, whatever the code declares meanwhile."""
    return replace(row, override=value, version=row.version + 1)


def reset(row: Overridable[Value]) -> Overridable[Value]:
    """Drop the override: the code's value is in force again (none declared: nothing configured)."""
    return replace(row, override=None, version=row.version + 1)
