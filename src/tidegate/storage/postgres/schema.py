"""PostgreSQL schema: migrations applied under an advisory lock, and the version check."""

from __future__ import annotations

from tidegate.storage import port
from tidegate.storage.postgres.database import Aggregate, Database
from tidegate.storage.shared.migrations import Migration, check_current, load_migrations, pending


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
            done = {row[0] for row in connection.execute(self._q("applied_versions"))}
            for migration in pending(self._migrations, done):
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
        with self._connection() as connection:
            exists = connection.execute(self._q("schema_version_exists")).fetchone()
            done: set[int] = set()
            if exists and exists[0]:
                done = {row[0] for row in connection.execute(self._q("applied_versions"))}
            check_current(self._migrations, done)
