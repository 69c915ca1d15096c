"""Composition root: the one place that picks a concrete storage adapter.

Everything above talks to the `Store` port; keeping the choice here means a
third adapter would touch this file and nothing else. The faces (CLI, API,
dashboard, demo) take what they need to open a store from here (the URL's
default, its environment variable, its parsing and its password mask, the
handle `open_store` returns) and import nothing of `storage` themselves: what
they read and change goes through the engine's services.
"""

from __future__ import annotations

from tidegate.domain.clock import SYSTEM_CLOCK, Clock
from tidegate.storage.port import Listener, Store
from tidegate.storage.urls import DATABASE_ENV, DEFAULT_DATABASE, masked, parse_database_url

__all__ = ["DATABASE_ENV", "DEFAULT_DATABASE", "Listener", "Store", "masked", "open_store", "parse_database_url"]


def open_store(
    url: str,
    *,
    migrate: bool = True,
    check: bool = True,
    listen_check: float | None = None,
    clock: Clock = SYSTEM_CLOCK,
) -> Store:
    """Open the store for `url`, then migrate it, or (if not allowed) check it is current.

    `check=False` skips both, for `tidegate db migrate`, which reports versions itself.
    `listen_check` is how often PostgreSQL's wake-up connections prove they are alive
    (None: the adapter's default); SQLite's wake-ups need no such check. `clock` is where
    the store's time comes from (PostgreSQL applies only its offset to the server's clock).
    """
    parsed = parse_database_url(url)
    store: Store
    if parsed.kind == "sqlite":
        from tidegate.storage.sqlite import SQLiteStore

        assert parsed.path is not None
        store = SQLiteStore(url, parsed.path, clock=clock)
    else:
        from tidegate.storage.postgres import PostgresStore

        if listen_check is None:
            store = PostgresStore(url, clock=clock)
        else:
            store = PostgresStore(url, listen_check=listen_check, clock=clock)
    try:
        if migrate:
            store.migrate()
        elif check:
            store.check_schema()
    except BaseException:
        store.close()
        raise
    return store
