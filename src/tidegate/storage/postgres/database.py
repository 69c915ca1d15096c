"""What every part of the PostgreSQL adapter shares: the connection pool and the named queries.

Each aggregate of the adapter (runs, claims, leases, workers, limits, pools,
steps, schema) is an `Aggregate` over one `Database`: the store's façade builds
them around the same pool and queries, so replacing the store's connection
or queries (tests/races.py does) reaches every verb.
"""

from __future__ import annotations

import json
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from operator import itemgetter
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import Row, RowFactory, dict_row, tuple_row
from psycopg.types.json import set_json_loads

from tidegate.domain.clock import SYSTEM_CLOCK, Clock
from tidegate.domain.errors import ConfigurationError
from tidegate.storage.postgres.ceilings import Ceilings
from tidegate.storage.postgres.connections import Connections
from tidegate.storage.postgres.connections import first_line as _first_line
from tidegate.storage.postgres.payloads import to_json, to_time
from tidegate.storage.postgres.pooler import check_session_defaults, clocked_sql, endpoint
from tidegate.storage.shared.sqlfile import load_queries
from tidegate.storage.urls import masked

# Connection set-up, like `SET jit = off` below, not a port verb: PostgreSQL only (SQLite reads the clock itself).
# Session-wide (not LOCAL), so the connection keeps it until the clock moves again; read by tidegate_now()
# (migrations/0006_clock_offset.sql).
SET_CLOCK_OFFSET = "SELECT set_config('tidegate.clock_offset', %(offset)s::text, false)"


class Database:
    """The pool (in autocommit mode) and the named queries of one store.

    Through a transaction-mode pooler (`?tidegate_pooler=transaction`, pooler.py)
    its connections keep no session state: the clock's offset is written into
    the statements (`query`), nothing is prepared or set per session, and
    `listen_url` is the direct URL, if any.
    """

    def __init__(self, url: str, *, min_size: int, max_size: int, clock: Clock = SYSTEM_CLOCK) -> None:
        self.clock = clock  # the server's clock is the time; only this clock's offset is applied to it
        self.queries = load_queries("tidegate.storage.postgres")
        self.ceilings = Ceilings()  # shared by every submit path of this store (ceilings.py)
        found = endpoint(url)
        self.pooled = found.pooled
        self.url = found.url  # what libpq is given (without tidegate's own parameter): the async pools' too
        self.listen_url = found.listen_url
        self.connections = Connections(
            found.url,
            where=_describe(found.url),
            min_size=min_size,
            max_size=max_size,
            configure=_configure_pooled if found.pooled else _configure,
        )
        self._offsets: weakref.WeakKeyDictionary[psycopg.Connection[Any], float] = weakref.WeakKeyDictionary()
        self.connection: Callable[[], AbstractContextManager[psycopg.Connection[Any]]] = (
            self.connections.connection if found.pooled else self._clocked_connection
        )
        if found.pooled:
            try:
                with self.connections.connection() as connection:
                    check_session_defaults(connection, self.connections.where)
            except BaseException:
                self.connections.close()
                raise

    def query(self, name: str) -> str:
        """The named statement; through a pooler, with the clock's offset written in (no session setting)."""
        text = self.queries[name]
        return clocked_sql(text, self.clock.offset) if self.pooled else text

    @contextmanager
    def _clocked_connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection whose `tidegate_now()` reads the injected clock's offset.

        The offset is a session setting, written at checkout (an autocommit
        statement of its own, before any transaction) only when it differs
        from what that connection was last given. A connection starts at 0,
        so the system clock never costs a statement, and a moved test clock
        costs one per connection each time it moves, outside every verb's
        transaction and pipeline.
        """
        with self.connections.connection() as connection:
            offset = self.clock.offset
            if self._offsets.get(connection, 0.0) != offset:
                connection.execute(SET_CLOCK_OFFSET, {"offset": repr(offset)})
                self._offsets[connection] = offset
            yield connection


class Aggregate:
    """A group of the port's verbs over the shared `Database`."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def _connection(self) -> AbstractContextManager[psycopg.Connection[Any]]:
        return self._db.connection()

    def _q(self, name: str) -> str:
        return self._db.query(name)

    def _lock_scopes(self, connection: psycopg.Connection[Any], keys: Sequence[str]) -> None:
        """Create (on first use) and lock the scope rows, in key order."""
        connection.execute(self._q("upsert_scopes"), {"keys": list(keys)})
        connection.execute(self._q("lock_scopes"), {"keys": list(keys)})

    def _fetchone(self, name: str, params: Mapping[str, Any] | None = None) -> tuple[Any, ...] | None:
        """One autocommit statement (a read needs no transaction block)."""
        with self._connection() as connection:
            return named_cursor(connection, name, tuple_row).execute(self._q(name), params).fetchone()

    def _fetchall(self, name: str, params: Mapping[str, Any] | None = None) -> list[tuple[Any, ...]]:
        with self._connection() as connection:
            return named_cursor(connection, name, tuple_row).execute(self._q(name), params).fetchall()

    def _fetch_dicts(self, name: str, params: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        with self._connection() as connection:
            return named_cursor(connection, name, dict_row).execute(self._q(name), params).fetchall()

    # The dialect of the reads written once (storage/shared/reads.py): one autocommit statement each.
    _rows = _fetch_dicts
    _tuples = _fetchall
    _to_time = staticmethod(to_time)
    _to_json = staticmethod(to_json)


def named_cursor(connection: psycopg.Connection[Any], name: str, rows: RowFactory[Row]) -> psycopg.Cursor[Row]:
    """A cursor for the named statement: one that inlines its values if it is planned per call."""
    if name in PLANNED_PER_CALL:
        return psycopg.ClientCursor(connection, row_factory=rows)
    return connection.cursor(row_factory=rows)


def _sorted_loads(data: str | bytes) -> Any:
    """Decode JSON with object keys sorted, as the SQLite adapter returns them.

    SQLite keeps the text `dumps(sort_keys=True)` wrote; jsonb keeps its own
    key order (shortest first), which would make the same args, results and
    event metadata iterate differently on the two adapters.
    """
    return json.loads(data, object_pairs_hook=_sorted_object)


def _sorted_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    return dict(sorted(pairs, key=itemgetter(0)))


# Generic plans, prepared at their second use: see _configure. Read by tests/contract/test_plan_cache.py.
PLAN_CACHE_MODE = "force_generic_plan"
PREPARE_THRESHOLD = 1

# Operator reads whose filters are optional (`%(queue)s::text IS NULL OR queue = %(queue)s::text`). One
# generic plan must serve every mix of filters, so it cannot walk the index of the filter given: beside
# 200,000 runs, `page_runs` of a rare status took 24 ms with the generic plan against 0.16 ms planned for
# its values. These go with their values inlined (psycopg's ClientCursor: simple protocol, never
# prepared), so PostgreSQL plans each call for what it asks. tests/contract/test_plan_cache.py fails if a
# query with an optional filter is missing here.
PLANNED_PER_CALL = frozenset(
    {"enqueue_active", "finished_count", "list_queued", "page_runs", "run_pace", "status_counts"}
)


def _configure(connection: psycopg.Connection[Any]) -> None:
    """Set up each new pooled connection.

    JIT off: every statement here is short, but a plan that counts or sorts
    a large backlog can pass jit_above_cost once the table has statistics,
    and then each call compiles for 40-200 ms (a submit behind 100,000
    queued runs took 45 ms instead of 2 ms).

    Generic plans, prepared at their second use: left to `auto`, PostgreSQL planned
    `enqueue`, `claim_window`, `claim_runs` and `next_due` again on nearly
    every call, and planning cost more than executing (docs/postgres-profile.md,
    lever 1). Every hot statement filters on constants (`status = 'queued'`)
    and walks an index whatever its parameters, so one generic plan per
    connection serves every call, also beside a large blocked backlog
    (tests/contract/test_plan_cache.py checks those plans). psycopg then
    prepares a statement on its second use rather than its sixth, so a
    statement is planned at most twice per connection. Not at its first use:
    a statement used once (a migration script, which holds many statements
    and so cannot be prepared at all) would only take a place in psycopg's
    cache of 100 prepared statements.

    READ COMMITTED by default, whatever the server's: every verb is written
    for it, and a submit's implicit transaction (pipeline.implicit_transaction)
    has no BEGIN to say so."""
    set_json_loads(_sorted_loads, connection)
    connection.prepare_threshold = PREPARE_THRESHOLD
    connection.execute(CONFIGURE, {"mode": PLAN_CACHE_MODE})


async def configure_async(connection: psycopg.AsyncConnection[Any]) -> None:
    """`_configure` for a connection of the async pool (async_connections.py): the same settings."""
    set_json_loads(_sorted_loads, connection)
    connection.prepare_threshold = PREPARE_THRESHOLD
    await connection.execute(CONFIGURE, {"mode": PLAN_CACHE_MODE})


async def configure_pooled_async(connection: psycopg.AsyncConnection[Any]) -> None:
    """`_configure_pooled` for a connection of the async pool: nothing prepared, nothing set."""
    set_json_loads(_sorted_loads, connection)
    connection.prepare_threshold = None


CONFIGURE = (
    "SELECT set_config('jit', 'off', false), set_config('plan_cache_mode', %(mode)s, false),"
    " set_config('default_transaction_isolation', 'read committed', false)"
)


def _configure_pooled(connection: psycopg.Connection[Any]) -> None:
    """Set up a connection to a transaction-mode pooler: nothing that lives in the server's session.

    No prepared statements (the next transaction may run on another server
    session, which never saw them) and no session settings (they would stay
    with the server session for whichever client it serves next): JIT and the
    isolation level come from the role or database (pooler.check_session_defaults).
    """
    set_json_loads(_sorted_loads, connection)
    connection.prepare_threshold = None


def _describe(url: str) -> str:
    """host:port/dbname for messages, never the password."""
    try:
        params = conninfo_to_dict(url)
    except psycopg.ProgrammingError as error:
        raise ConfigurationError(f"invalid PostgreSQL URL {masked(url)!r}: {masked(_first_line(error), url)}") from None
    host = params.get("host") or "localhost"
    port = params.get("port") or "5432"
    return f"{host}:{port}/{params.get('dbname') or params.get('user') or ''}"
