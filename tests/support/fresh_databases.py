"""Each test's own database, already migrated, without each test paying for the migration.

Migrating is most of what a new test database costs (about 0.1 s of DDL on
PostgreSQL, several times that on a loaded machine; tens of milliseconds on
SQLite), and over some 1,600 tests per backend that was minutes of the suite.
The database a test gets is still its own and still made by the product's
own `open_store` (no second copy of the schema to drift), only made
differently:

- SQLite: one file is migrated per session and each test gets a byte copy of
  it, created 0600 like the store's own files.
- PostgreSQL has no cheap copy of a schema (a database from a TEMPLATE is one,
  but dropping a database forces a checkpoint: seconds on a busy server), so
  a thread makes the next test's schema, migrated, while this test runs, and
  drops the last one: the DDL runs in the server beside the tests instead of
  between them.

A test that needs an empty database (it migrates, or checks an unmigrated
one, itself) is marked `unmigrated` and gets a bare file or schema, as before.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import closing
from pathlib import Path

from tidegate.bootstrap import open_store

LOCK_TIMEOUT = "20s"  # a test's connections still closing may hold locks on its tables a moment


def schema_url(admin_url: str, schema: str) -> str:
    """`admin_url` with `schema` alone on its search path: every table tidegate makes goes there."""
    return f"{admin_url}?options=-csearch_path%3D{schema}"


class MigratedSQLite:
    """Copies of one migrated SQLite file."""

    def __init__(self, folder: Path) -> None:
        self._template = folder / "migrated.db"
        open_store(f"sqlite:///{self._template}").close()
        with closing(sqlite3.connect(self._template)) as connection:  # everything in the main file
            connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def copy_to(self, path: Path) -> None:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "wb") as target, open(self._template, "rb") as source:
            shutil.copyfileobj(source, target)


class PostgresSchemas:
    """New schemas in the database at `admin_url`, bare or migrated, and their drops.

    One thread does the work beside the tests, in order: it makes the next test's migrated
    schema and drops the last test's, while the tests run."""

    def __init__(self, admin_url: str) -> None:
        self.admin_url = admin_url
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="test-schemas")
        self._next: Future[str] | None = None
        self._drops: list[tuple[str, str, Future[None]]] = []

    def bare(self) -> str:
        """A new, empty schema: its name."""
        import psycopg

        schema = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.admin_url, autocommit=True, connect_timeout=5) as admin:
            admin.execute(f'CREATE SCHEMA "{schema}"')
        return schema

    def migrated(self) -> str:
        """A new schema at the current version (made while the previous test ran): its name.

        If it could not be made then, it is made now, and a failure is the asking test's."""
        made, self._next = self._next, None
        try:
            schema = made.result() if made is not None else self._make_migrated()
        except Exception:  # made ahead while the server was away: once more, now
            schema = self._make_migrated()
        self._next = self._worker.submit(self._make_migrated)
        return schema

    def _make_migrated(self) -> str:
        schema = self.bare()
        try:
            open_store(schema_url(self.admin_url, schema)).close()
        except BaseException:
            self.drop(schema)
            raise
        return schema

    def drop_later(self, schema: str, test: str) -> None:
        """Drop `schema`, which `test` used, beside the next test; a failure fails the session (`close`)."""
        self._drops = [drop for drop in self._drops if not drop[2].done() or drop[2].exception() is not None]
        self._drops.append((test, schema, self._worker.submit(self.drop, schema)))

    def drop(self, schema: str) -> None:
        import psycopg

        with psycopg.connect(self.admin_url, autocommit=True, connect_timeout=5) as admin:
            admin.execute(f"SET lock_timeout = '{LOCK_TIMEOUT}'")
            admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')

    def close(self) -> None:
        """Wait for the drops, drop the schema made ahead for a test that never came, and raise
        if a test's schema could not be dropped (something of the test still held it)."""
        ahead, self._next = self._next, None
        self._worker.shutdown(wait=True)
        if ahead is not None and ahead.exception() is None:
            self.drop(ahead.result())
        failed = [
            f"{test}: schema {schema}: {done.exception()}" for test, schema, done in self._drops if done.exception()
        ]
        if failed:
            raise AssertionError("test schemas left behind:\n" + "\n".join(failed))
