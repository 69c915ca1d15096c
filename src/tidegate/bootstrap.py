"""Composition root: the one place that picks a concrete storage adapter.

Everything above talks to the `Store` port; keeping the choice here means a
third adapter would touch this file and nothing else.
"""

from __future__ import annotations

from tidegate.storage.port import Store
from tidegate.storage.urls import parse_database_url


def open_store(url: str, *, migrate: bool = True, check: bool = True, listen_check: float | None = None) -> Store:
    """Open the store for `url`, then migrate it, or (if not allowed) check it is current.

    `check=False` skips both, for `tidegate db migrate`, which reports versions itself.
    `listen_check` is how often PostgreSQL's wake-up connections prove they are alive
    (None: the adapter's default); SQLite's wake-ups need no such check.
    """
    parsed = parse_database_url(url)
    store: Store
    if parsed.kind == "sqlite":
        from tidegate.storage.sqlite import SQLiteStore

        assert parsed.path is not None
        store = SQLiteStore(url, parsed.path)
    else:
        from tidegate.storage.postgres import PostgresStore

        store = PostgresStore(url) if listen_check is None else PostgresStore(url, listen_check=listen_check)
    try:
        if migrate:
            store.migrate()
        elif check:
            store.check_schema()
    except BaseException:
        store.close()
        raise
    return store
