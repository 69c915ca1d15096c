"""A test's own database: a fresh SQLite file, or a fresh schema of a PostgreSQL database.

A schema per test (selected through `search_path` in the URL's `options`) keeps
tests apart on one server, in parallel too, without creating databases; it is
dropped with everything in it when the test ends.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tidegate.app import App
from tidegate.bootstrap import masked
from tidegate.domain.errors import ConfigurationError, StoreUnavailable

CONNECT_SECONDS = 5
DROP_LOCK_TIMEOUT = "20s"  # a test's connections still closing may hold locks on its tables a moment


def sqlite_url(folder: Path) -> str:
    """The embedded store in a file of `folder` (a test's tmp_path), created at first use."""
    return f"sqlite:///{folder}/tidegate.db"


@contextmanager
def postgres_schema(url: str) -> Iterator[str]:
    """A URL whose tables live in a new schema of the database at `url`; the schema is dropped after."""
    schema = create_schema(url)
    try:
        yield schema_url(url, schema)
    finally:
        drop_schema(url, schema)


def create_schema(url: str) -> str:
    """A new, empty schema in the database at `url`: its name."""
    if not url.startswith(("postgresql://", "postgres://")):
        raise ConfigurationError(f"--tidegate-postgres: expected a postgresql:// URL, got {masked(url)!r}")
    import psycopg
    from psycopg import sql

    schema = f"tidegate_test_{uuid.uuid4().hex[:12]}"
    try:
        with psycopg.connect(url, autocommit=True, connect_timeout=CONNECT_SECONDS) as admin:
            admin.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    except psycopg.Error as error:
        said = " ".join(str(error).split())  # one line: libpq's hints come on lines of their own
        raise StoreUnavailable(f"--tidegate-postgres: {masked(url)}: {masked(said, url)}") from None
    return schema


def schema_url(url: str, schema: str) -> str:
    """`url` with `schema` first on its search path: every table tidegate makes goes there."""
    separator = "&" if "?" in url else "?"
    return f"{url}{separator}options=-csearch_path%3D{schema}"


def drop_schema(url: str, schema: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(url, autocommit=True, connect_timeout=CONNECT_SECONDS) as admin:
        admin.execute(sql.SQL("SET lock_timeout = {}").format(sql.Literal(DROP_LOCK_TIMEOUT)))
        admin.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


class IsolatedApp(App):
    """The `tidegate_app` fixture: an App on the test's own database and clock."""

    @property
    def database_url(self) -> str:
        """The test's database, for an app the code under test builds itself (`make_app(url)`)."""
        return self.database
