"""PostgreSQL: the admission ceilings a store last read, and the rules version they hold under.

A submit that meets no ceiling is one statement (`enqueue_free`, `enqueue_unique_free`): it
stores its batch only while the rules version is the one under which this store read that no
ceiling applies to its queues. Every submit path of one store (its sync pool, its async pool, a
caller's connection) asks this one record, so a ceiling read by any of them serves them all.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class Ceilings:
    """The admission ceilings as a submit last read them (`enqueue_ceilings`), with their version."""

    def __init__(self) -> None:
        self._read: tuple[str, bool, frozenset[str]] | None = None  # (version, global ceiling, queues with one)

    @property
    def known(self) -> bool:
        """Whether they were read (and not found stale since)."""
        return self._read is not None

    def read(self, row: tuple[Any, ...] | None) -> None:
        """Remember an `enqueue_ceilings` row (None, before the rules version exists: nothing)."""
        self._read = None if row is None else (row[0], bool(row[1]), frozenset(row[2]))

    def forget(self) -> None:
        """A one-statement submit found the version moved: read them again before the next one."""
        self._read = None

    def free_version(self, queues: Sequence[str]) -> str | None:
        """The version under which no ceiling applies to these queues; None when one may apply
        or nothing was read yet (then the submit goes the full way)."""
        read = self._read
        if read is None or read[1] or not read[2].isdisjoint(queues):
            return None
        return read[0]
