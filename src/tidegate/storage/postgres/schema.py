"""PostgreSQL schema: migrations applied under an advisory lock, and the version check."""

from __future__ import annotations

from tidegate.storage import port
from tidegate.storage.migrations import Migration, check_current, load_migrations, pending
from tidegate.storage.postgres.database import Aggregate, Database


class Schema(Aggregate, port.SchemaVerbs):
    """The schema verbs of the storage port."""

    def __init__(self, db: Database) -> None:
        super().__init__(db)
        self._migrations: list[Migration] = load_migrations("tidegate.storage.postgres.migrations")

    def migrate(self) -> list[int]:
        applied = []
        with self._connection() as connection, connection.transaction():
            connection.execute(self._q("migrate_lock"))
            connection.execute(self._q("migrate_version_table"))
            # fetchone() is typed Optional; this statement always returns one row
            current = connection.execute(self._q("schema_version")).fetchone()[0]  # type: ignore[index]
            for migration in pending(self._migrations, current):
                connection.execute(migration.sql.encode())  # a script: no parameters, many statements
                connection.execute(self._q("record_migration"), {"version": migration.version, "name": migration.name})
                applied.append(migration.version)
        return applied

    def schema_version(self) -> int:
        with self._connection() as connection:
            exists = connection.execute(self._q("schema_version_exists")).fetchone()
            if not exists or not exists[0]:
                return 0
            row = connection.execute(self._q("schema_version")).fetchone()
            version: int = row[0] if row else 0  # coalesce(max(version), 0) always returns its one row
            return version

    def check_schema(self) -> None:
        check_current(self._migrations, self.schema_version())
