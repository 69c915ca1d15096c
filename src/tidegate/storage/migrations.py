"""Versioned migrations: numbered .sql files applied in order, once.

Each adapter applies the files of its own dialect in one transaction per
file and records the version, so re-running is a no-op and a database from
a newer tidegate is recognised and refused instead of being misread.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources

from tidegate.domain.errors import SchemaError

_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str


def load_migrations(package: str) -> list[Migration]:
    folder = resources.files(package)
    found = []
    for entry in folder.iterdir():
        match = _FILE.match(entry.name)
        if match:
            found.append(Migration(int(match.group(1)), match.group(2), entry.read_text(encoding="utf-8")))
    found.sort(key=lambda migration: migration.version)
    return found


def pending(migrations: list[Migration], current: int) -> list[Migration]:
    latest = migrations[-1].version if migrations else 0
    if current > latest:
        raise SchemaError(
            f"the database schema is version {current}, newer than this tidegate knows ({latest}); "
            "upgrade tidegate before using this database"
        )
    return [migration for migration in migrations if migration.version > current]


def check_current(migrations: list[Migration], current: int) -> None:
    """Refuse a database that is newer than the code, or not migrated yet."""
    latest = migrations[-1].version if migrations else 0
    pending(migrations, current)
    if current < latest:
        raise SchemaError(
            f"the database schema is version {current}, this tidegate needs {latest}: run 'tidegate db migrate'"
        )
