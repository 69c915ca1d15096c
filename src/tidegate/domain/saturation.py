"""A block reason's part: a scope, or a rate's window, that had no room for a run."""

from __future__ import annotations

from dataclasses import dataclass

from tidegate.domain.durations import format_duration


@dataclass(frozen=True)
class Saturation:
    """A scope that had no free slot for a candidate: part of its block reason."""

    scope: str
    used: int
    limit: int
    per: float | None = None  # a rate's window (s): `used` of `limit` per `per` are taken
    retry_at: float | None = None  # a rate: when its windows next allow the start (database clock)

    def __str__(self) -> str:
        if self.per is None:
            return f"{self.scope} {self.used}/{self.limit}"
        return f"{self.scope} {self.used} of {self.limit} per {format_duration(self.per)} used"
