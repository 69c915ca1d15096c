"""Handing events to a stream in id order, without skipping one that commits late.

Event ids come from a sequence, and on PostgreSQL a transaction that took a
lower id may commit after one that took a higher id. A stream that moved its
cursor past the gap would never see the late event. So the events after a
gap are held back until the gap fills, or until it has stayed open for
`patience` seconds: then it is taken for a rolled-back transaction's (ids are
never reused) and passed. On SQLite (one writer) a gap only follows `db prune`.
"""

from __future__ import annotations

from collections.abc import Sequence

from tidegate.domain.model import EventRecord


class InOrder:
    """The cursor of one stream: the last id handed out, and the gaps it is waiting on."""

    def __init__(self, cursor: int, patience: float) -> None:
        self.cursor = cursor
        self.patience = patience
        self._gap_seen: dict[int, float] = {}  # first id of a gap -> when it was first seen open

    def take(self, events: Sequence[EventRecord], now: float) -> list[EventRecord]:
        """The events (ids above the cursor, ascending) that may go out now; the cursor moves past them."""
        ready: list[EventRecord] = []
        expected = self.cursor + 1
        for event in events:
            if event.id != expected:
                seen = self._gap_seen.setdefault(expected, now)
                if now - seen < self.patience:
                    break
            ready.append(event)
            expected = event.id + 1
        if ready:
            self.cursor = ready[-1].id
            self._gap_seen = {start: seen for start, seen in self._gap_seen.items() if start > self.cursor}
        return ready

    @property
    def waiting(self) -> bool:
        """A gap holds events back: read again once `patience` has passed, woken or not."""
        return bool(self._gap_seen)
