"""The database's schema as an operator handles it: its version, and the pending migrations applied.

`tidegate db migrate` and the API's `/readyz` (a read the store must answer) come through here.
"""

from __future__ import annotations

from dataclasses import dataclass

from tidegate.storage.port import Store


@dataclass(frozen=True)
class Migrated:
    before: int  # the schema version found
    applied: list[int]  # the migrations applied, in order (empty: already up to date)
    version: int  # the schema version now


def schema_version(store: Store) -> int:
    """The version of the schema in the database (a round trip: it proves the store answers)."""
    return store.schema_version()


def migrate(store: Store) -> Migrated:
    """Apply the pending migrations; a schema newer than this tidegate is refused, untouched."""
    before = store.schema_version()
    applied = store.migrate()
    return Migrated(before, applied, store.schema_version())
