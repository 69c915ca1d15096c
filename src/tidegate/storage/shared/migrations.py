"""Versioned migrations: numbered .sql files applied in order, once.

Each adapter applies the files of its own dialect in one transaction per
file and records the version, so re-running is a no-op and a database from
a newer tidegate is recognised and refused instead of being misread.

What is pending is every known version not recorded, not every version above
the highest recorded: branches developed side by side number their files
apart, and a database that took a higher one first must still get the lower
one when both land.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Collection
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
    found.sort(key=lambda migration: (migration.version, migration.name))
    for first, second in itertools.pairwise(found):
        if first.version == second.version:
            # only one of them would ever be recorded: the other is skipped on every database
            raise SchemaError(f"two migrations numbered {first.version:04d} in {package}: {first.name}, {second.name}")
    return found


def pending(migrations: list[Migration], applied: Collection[int]) -> list[Migration]:
    """The migrations not applied yet, in order; a database holding a version this code does not
    know is from a newer tidegate and refused."""
    latest = migrations[-1].version if migrations else 0
    known = {migration.version for migration in migrations}
    unknown = sorted(version for version in applied if version not in known)
    if unknown:
        raise SchemaError(
            f"the database schema is version {max(applied)}, newer than this tidegate knows ({latest}); "
            "upgrade tidegate before using this database"
        )
    return [migration for migration in migrations if migration.version not in applied]


def check_current(migrations: list[Migration], applied: Collection[int]) -> None:
    """Refuse a database that is newer than the code, or not migrated yet."""
    latest = migrations[-1].version if migrations else 0
    missing = pending(migrations, applied)
    if missing:
        raise SchemaError(
            f"the database schema is version {max(applied, default=0)}, this tidegate needs {latest}"
            f" (missing {', '.join(str(migration.version) for migration in missing)}): run 'tidegate db migrate'"
        )
