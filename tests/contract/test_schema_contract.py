"""The schema through the Store port: migrate once, know the version, refuse a mismatch.

Each test opens its own store on a fresh database without migrating (the
`store` fixture migrates). Deeper cases (concurrent migrations, a newer
schema) are in test_migrations.py.
"""

from __future__ import annotations

import pytest

from tidegate import SchemaError
from tidegate.bootstrap import open_store
from tidegate.storage.shared.migrations import load_migrations

# each test starts from an empty database: what it proves is how one gets migrated
pytestmark = pytest.mark.unmigrated


def test_migrate_applies_every_version_once_and_then_nothing(database_url, backend):
    store = open_store(database_url, migrate=False, check=False)
    try:
        assert store.schema_version() == 0
        applied = store.migrate()
        # Every shipped version once, in order (numbers may skip: each change takes its own number).
        shipped = [migration.version for migration in load_migrations(f"tidegate.storage.{backend}.migrations")]
        assert len(applied) >= 1 and applied == shipped and applied[-1] == store.schema_version()
        assert store.migrate() == []
        store.check_schema()
    finally:
        store.close()


def test_check_schema_refuses_an_unmigrated_database(database_url):
    store = open_store(database_url, migrate=False, check=False)
    try:
        with pytest.raises(SchemaError):
            store.check_schema()
    finally:
        store.close()
