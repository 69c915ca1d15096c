"""SQLite schema: migrations applied in one write transaction each, and the version check."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator

from tidegate.storage import port
from tidegate.storage.shared.migrations import Migration, check_current, load_migrations, pending
from tidegate.storage.sqlite.database import Aggregate, Database


class Schema(Aggregate, port.SchemaVerbs):
    """The schema verbs of the storage port."""

    def __init__(self, db: Database) -> None:
        super().__init__(db)
        self._migrations: list[Migration] = load_migrations("tidegate.storage.sqlite.migrations")

    def migrate(self) -> list[int]:
        applied = []
        with self._write() as (connection, now):
            connection.execute(self._q("migrate_version_table"))
            done = {row[0] for row in connection.execute(self._q("applied_versions"))}
            for migration in pending(self._migrations, done):
                for statement in _statements(migration.sql):
                    connection.execute(statement)
                connection.execute(
                    self._q("record_migration"),
                    {"version": migration.version, "name": migration.name, "now": now},
                )
                applied.append(migration.version)
        return applied

    def schema_version(self) -> int:
        connection = self._connection()
        exists = connection.execute(self._q("schema_version_exists")).fetchone()
        if not exists:
            return 0
        version: int = connection.execute(self._q("schema_version")).fetchone()[0]
        return version

    def check_schema(self) -> None:
        connection = self._connection()
        exists = connection.execute(self._q("schema_version_exists")).fetchone()
        done = {row[0] for row in connection.execute(self._q("applied_versions"))} if exists else set()
        check_current(self._migrations, done)


def _statements(script: str) -> Iterator[str]:
    """Split a migration into statements, the way SQLite's own parser sees them (comments and
    quoted ';' included), without executescript's implicit COMMIT, which would break the
    one-transaction-per-migration rule."""
    buffer = ""
    for line in script.splitlines(keepends=True):
        buffer += line
        if sqlite3.complete_statement(buffer):
            if buffer.strip():
                yield buffer.strip()
            buffer = ""
    if buffer.strip() and not all(line.strip().startswith("--") or not line.strip() for line in buffer.splitlines()):
        raise ValueError(f"incomplete SQL statement at the end of a migration: {buffer.strip()[:80]!r}")
