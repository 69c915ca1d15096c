"""What one PostgreSQL store call costs on the wire: round trips, statements, plans, rows, locks, server time.

Installed on an open PostgreSQL store through the seam tests/races.py also
uses (`Database.connection`, the factory every aggregate checks connections
out of), it records each checkout of a pooled connection:

- the statements sent, by their name in the adapter's .sql files (a proxy
  around the connection logs every `execute`);
- the protocol as libpq traced it (`PGconn.trace`, one trace file per
  connection): a round trip is a Flush, Sync or simple Query that the server
  then answers (the client cannot go on before it reads that answer), so the
  count is exact however loaded the machine is; a statement parsed unnamed is
  parsed and planned on every call, one bound to a named statement
  (`_pg3_*`) was prepared by psycopg after `prepare_threshold` (5) uses on
  that connection; rows are the DataRows before each CommandComplete;
- the time the client waited: from each such Flush/Sync to the last answer
  received before it sent again (server, network and libpq together);
- optionally the locks the transaction holds just before its COMMIT
  (`pg_locks` of its own backend, sent in the same batch as the COMMIT, so no
  extra round trip): advisory and relation locks. Row locks (FOR UPDATE)
  live in the tuples, not in pg_locks: they are the rows of the locking
  statements;
- optionally the server time of each statement as executed, from
  auto_explain (loaded per session, `log_level = notice`, so the plans come
  back to this client as notices; no server configuration is touched).

pg_stat_statements is installed but not preloaded on this server (it needs
`shared_preload_libraries` and a restart), and `log_statement` would write to
the shared server log: hence the client-side trace.
"""

from __future__ import annotations

import ctypes
import os
import re
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from typing import Any

import psycopg

MESSAGE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+\t([FB])\t\d+\t(\w+)")
DURATION = re.compile(r"^duration: ([\d.]+) ms\s+plan:")
NAMED_BIND = re.compile(r'^Bind\t "[^"]*" "(_pg3_\d+)"')
LOCKS_SQL = (
    "SELECT locktype, mode, CASE WHEN locktype = 'relation' THEN "
    "(SELECT relkind::text FROM pg_class WHERE oid = relation) || ' ' || relation::regclass::text "
    "WHEN locktype = 'advisory' THEN objsubid::text END FROM pg_locks "
    "WHERE pid = pg_backend_pid() AND locktype NOT IN ('virtualxid', 'transactionid') "
    "AND (locktype <> 'relation' OR relation::regclass::text NOT LIKE 'pg_%%')"
)
LIBC = ctypes.CDLL(None)  # fflush(NULL): libpq's trace stream is buffered; flush it before reading the file
PLANS_SQL = "SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements"
PLACEHOLDER = re.compile(r"%\\\(\w+\\\)s")
EXPLAIN_SETUP = (
    "LOAD 'auto_explain'",
    "SET auto_explain.log_min_duration = 0",
    "SET auto_explain.log_analyze = on",
    "SET auto_explain.log_timing = on",
    "SET auto_explain.log_level = notice",
    "SET auto_explain.log_format = json",
)


@dataclass
class Statement:
    name: str
    rows: int = 0
    prepared: bool = False  # bound to a server-side prepared statement (psycopg's auto-prepare)
    server_ms: float | None = None  # executor time, from auto_explain (planning not included)


@dataclass
class Checkout:
    """One use of a pooled connection: usually one store verb."""

    verb: str
    thread: str
    statements: list[Statement] = field(default_factory=list)
    round_trips: int = 0
    locks: list[tuple[str, str, str]] = field(default_factory=list)
    plans: list[tuple[str, int, int]] = field(default_factory=list)  # (statement, generic plans, custom plans)

    @property
    def server_ms(self) -> float:
        return sum(statement.server_ms or 0.0 for statement in self.statements)


class Tracer:
    """Records every checkout of a PostgreSQL store's connections (see the module docstring)."""

    def __init__(self, store: object, *, locks: bool = False, explain: bool = False, plans: bool = False) -> None:
        db = getattr(store, "_db", None)
        if db is None or not hasattr(db, "connection"):
            raise SystemExit("the tracer needs a PostgreSQL store (tidegate.storage.postgres)")
        self._db = db
        self._original = db.connection
        self._names: dict[str, str] = {text: name for name, text in db.queries.items()}
        self.locks = locks
        self.explain = explain
        self.plans = plans  # read the connection's plan cache after each verb (pg_prepared_statements)
        self.examples: dict[str, tuple[str, Any]] = {}  # the last text and parameters sent of each named query
        self._patterns: list[tuple[re.Pattern[str], str]] = [
            (re.compile(PLACEHOLDER.sub(r"\\$\\d+", re.escape(t)) + "$"), n) for t, n in self._names.items()
        ]
        self._raw: list[tuple[str, list[str | bytes], dict[str, str], str, str, _Extras]] = []
        self._files: dict[int, str] = {}
        self._explaining: set[int] = set()
        self._notices: dict[int, list[str]] = {}
        self._lock = threading.Lock()
        db.connection = self._connection

    def query(self, name: str) -> str:
        """The text of one of the adapter's named queries."""
        text: str = self._db.queries[name]
        return text

    def raw_connection(self) -> AbstractContextManager[psycopg.Connection[Any]]:
        """A connection from the store's pool, untraced (to set a session setting on it)."""
        connection: AbstractContextManager[psycopg.Connection[Any]] = self._original()
        return connection

    def close(self) -> None:
        self._db.connection = self._original
        for path in self._files.values():
            os.unlink(path)
        self._files.clear()

    def take(self) -> list[Checkout]:
        """The checkouts recorded since the last take (parsed now: the calls traced pay only for the copy)."""
        with self._lock:
            taken, self._raw = self._raw, []
        return [_parse(*raw) for raw in taken]

    @contextmanager
    def _connection(self) -> Iterator[Any]:
        opened: AbstractContextManager[psycopg.Connection[Any]] = self._original()
        with opened as connection:
            key = id(connection)
            if self.explain and key not in self._explaining:
                for statement in EXPLAIN_SETUP:
                    connection.execute(statement)
                connection.add_notice_handler(
                    lambda notice: self._notices.setdefault(key, []).append(notice.message_primary or "")
                )
                self._explaining.add(key)
            path = self._trace_file(connection)
            LIBC.fflush(None)
            start = os.path.getsize(path)
            self._notices[key] = []
            proxy = _Traced(connection, LOCKS_SQL if self.locks else None)
            try:
                yield proxy
            finally:
                extras = _Extras(proxy.locks(), self._notices.pop(key, []))
                LIBC.fflush(None)
                with open(path, encoding="utf-8", errors="replace") as trace:
                    trace.seek(start)
                    text = trace.read()
                if self.plans:  # after the trace is read: not part of the verb
                    extras.plans = [(self._plan_name(sql), g, c) for sql, g, c in connection.execute(PLANS_SQL)]
                for query, params in zip(proxy.sent, proxy.params, strict=True):
                    if isinstance(query, str) and query in self._names:
                        self.examples[self._names[query]] = (query, params)
                with self._lock:
                    self._raw.append((text, proxy.sent, self._names, _verb(), threading.current_thread().name, extras))

    def _plan_name(self, text: str) -> str:
        for pattern, name in self._patterns:
            if pattern.match(text):
                return name
        return text.split()[0]

    def _trace_file(self, connection: psycopg.Connection[Any]) -> str:
        key = id(connection)
        if key not in self._files:
            handle, path = tempfile.mkstemp(prefix="tidegate-trace-")
            connection.pgconn.trace(handle)  # libpq owns the descriptor now, line-buffered
            self._files[key] = path
        return self._files[key]


@dataclass
class _Extras:
    locks: list[tuple[str, str, str]]
    notices: list[str]
    plans: list[tuple[str, int, int]] = field(default_factory=list)


class _Traced:
    """A connection that logs what it is asked to execute (and may read its locks before COMMIT)."""

    def __init__(self, connection: psycopg.Connection[Any], locks_sql: str | None) -> None:
        self._connection = connection
        self._locks_sql = locks_sql
        self._locks_cursor: psycopg.Cursor[Any] | None = None
        self.sent: list[str | bytes] = []
        self.params: list[Any] = []

    def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
        if query == b"COMMIT" and self._locks_sql is not None:
            self._locks_cursor = self._connection.execute(self._locks_sql)
            self.sent.append("pg_locks (profiler)")
            self.params.append(None)
        self.sent.append(query)
        self.params.append(params)
        return self._connection.execute(query, params, **kwargs)

    def cursor(self, *args: Any, **kwargs: Any) -> _TracedCursor:
        return _TracedCursor(self._connection.cursor(*args, **kwargs), self)

    def locks(self) -> list[tuple[str, str, str]]:
        if self._locks_cursor is None:
            return []
        try:
            return [(row[0], row[1], row[2] or "") for row in self._locks_cursor.fetchall()]
        except psycopg.Error:
            return []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._connection, name)


class _TracedCursor:
    def __init__(self, cursor: psycopg.Cursor[Any], owner: _Traced) -> None:
        self._cursor = cursor
        self._owner = owner

    def execute(self, query: Any, params: Any = None, **kwargs: Any) -> _TracedCursor:
        self._owner.sent.append(query)
        self._owner.params.append(params)
        self._cursor.execute(query, params, **kwargs)
        return self

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cursor, name)


def _verb() -> str:
    """The store verb that checked the connection out: the outermost frame in the PostgreSQL adapter."""
    frame = sys._getframe(2)
    found = "?"
    while frame is not None:
        path = frame.f_code.co_filename.replace(os.sep, "/")
        if "tidegate/storage/postgres/" in path and not path.endswith(("database.py", "connections.py")):
            found = frame.f_code.co_qualname
        elif found != "?":
            break
        frame = frame.f_back  # type: ignore[assignment]
    return found


def _name(query: str | bytes, names: dict[str, str]) -> str:
    if isinstance(query, bytes):
        query = query.decode()
    return names.get(query, query.split()[0] if query.split() else "?")


def _parse(
    text: str, sent: list[str | bytes], names: dict[str, str], verb: str, thread: str, extras: _Extras
) -> Checkout:
    """Pair the traced protocol messages with the statements the proxy saw sent, in order."""
    record = Checkout(verb, thread, locks=extras.locks, plans=extras.plans)
    record.statements = [Statement(_name(query, names)) for query in sent]
    last_front = ""
    executed = completed = 0
    for direction, kind, body in _messages(text):
        if direction == "F":
            last_front = kind
            if kind == "Bind" and NAMED_BIND.match(body) and executed < len(record.statements):
                record.statements[executed].prepared = True
            executed += kind in ("Execute", "Query")
            continue
        record.round_trips += last_front in ("Flush", "Sync", "Query")  # the first answer after a wait
        last_front = ""
        if kind == "DataRow" and completed < len(record.statements):
            record.statements[completed].rows += 1
        completed += kind in ("CommandComplete", "ErrorResponse", "EmptyQueryResponse")
    _attach_explains(record, extras.notices)
    return record


def _messages(text: str) -> Iterator[tuple[str, str, str]]:
    """(direction F or B, message type, the rest) of each traced message; a string that spans lines
    (a query's text) continues its message."""
    for line in text.splitlines():
        match = MESSAGE.match(line)
        if match:
            body = line.split("\t", 3)[3] if line.count("\t") >= 3 else ""
            yield match.group(1), match.group(2), body


def _attach_explains(record: Checkout, notices: list[str]) -> None:
    """auto_explain reports every planned statement in execution order (not BEGIN, COMMIT or SET)."""
    plans = []
    for notice in notices:
        match = DURATION.match(notice)
        if match:
            plans.append(float(match.group(1)))
    explained = [s for s in record.statements if s.name not in ("BEGIN", "COMMIT", "SET", "pg_locks (profiler)")]
    if len(plans) == len(explained):
        for statement, ms in zip(explained, plans, strict=True):
            statement.server_ms = ms
