"""Deterministic races between two store calls, for the serialisation proofs.

A race here is two parties (threads, each running one store verb) ordered
so that the interleaving a lock exists to forbid is the one that happens if
the lock is missing. The first party runs until it *parks* at a seam (a
point inside its transaction, after it read what it decides on and before
it writes the decision) and stays there holding whatever its transaction
holds. Then the second starts, and the first is let go only once the second
has parked too, finished, or is *blocked* on a lock the first holds. No
timing decides anything:

- with the mechanism, the second waits for the first (it is blocked), the
  first commits, and the second decides on what the first wrote;
- without it, the second reads the same state as the first and parks (or
  ends) beside it: both decide on the same free place.

Blocked is exact on both adapters. On PostgreSQL it is
`pg_blocking_pids(pid)` of the party's backend (the pid comes from the
store's connection). On SQLite it is being inside `BEGIN IMMEDIATE` while
the first party holds the write lock: that statement cannot return before
the first commits (the first parks inside its own write transaction).

`remove_begin_immediate` and the `queries` override are the mutations: the
proof tests run once with each mechanism and once without, and must see a
violation exactly when it is removed.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from .conftest import wait_until

_current = threading.local()
TIMEOUT = 30.0


class Party:
    """One racer: a thread running `action`, parking at the seam when it passes it."""

    def __init__(self, name: str, action: Callable[[], Any]) -> None:
        self.name = name
        self.action = action
        self.pid: int | None = None  # PostgreSQL: the backend of its transaction
        self.in_begin_immediate = False  # SQLite: waiting for (or taking) the write lock
        self.parked = threading.Event()
        self.go = threading.Event()
        self.done = threading.Event()
        self.result: Any = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)

    def _run(self) -> None:
        _current.party = self
        try:
            self.result = self.action()
        except BaseException as error:  # the test reads and judges it
            self.error = error
        finally:
            self.done.set()

    def park(self) -> None:
        self.parked.set()
        if not self.go.wait(TIMEOUT):
            raise TimeoutError(f"{self.name} was never let go")


def current() -> Party | None:
    return getattr(_current, "party", None)


def park_here() -> None:
    """The seam: the calling party parks (a call from outside any race passes)."""
    party = current()
    if party is not None:
        party.park()


def seam(function: Callable[..., Any]) -> Callable[..., Any]:
    """`function`, parking the calling party first."""

    def parked(*args: Any, **kwargs: Any) -> Any:
        park_here()
        return function(*args, **kwargs)

    return parked


def seam_after(function: Callable[..., Any]) -> Callable[..., Any]:
    """`function`, parking the calling party after it returns."""

    def parked(*args: Any, **kwargs: Any) -> Any:
        result = function(*args, **kwargs)
        park_here()
        return result

    return parked


class Race:
    """Two parties on one database, ordered as the module docstring says."""

    def __init__(self, database_url: str) -> None:
        self.postgres = not database_url.startswith("sqlite")
        self._monitor: Any = None
        self.second_ended_first = False
        if self.postgres:
            import psycopg

            self._monitor = psycopg.connect(database_url, autocommit=True)

    def close(self) -> None:
        if self._monitor is not None:
            self._monitor.close()

    def blocked(self, party: Party, by: Party | None = None) -> bool:
        """Whether `party` waits for a lock; with `by` known, only for one `by` (or the race's stall)
        holds: another session's passing lock (a NOTIFY's commit elsewhere in the suite) is no
        answer to who ends first."""
        if not self.postgres:
            return party.in_begin_immediate
        if party.pid is None:
            return False
        if by is None or by.pid is None:
            row = self._monitor.execute("SELECT cardinality(pg_blocking_pids(%s)) > 0", (party.pid,)).fetchone()
        else:
            holders = [by.pid, self._monitor.info.backend_pid]
            row = self._monitor.execute("SELECT pg_blocking_pids(%s) && %s::int[]", (party.pid, holders)).fetchone()
        return bool(row[0])

    def run(
        self,
        first: Party,
        second: Party,
        first_parked: Callable[[Party], bool] | None = None,
        release: Callable[[], None] | None = None,
    ) -> None:
        """Start `first`, wait until it parks; start `second`, wait until it parks, ends or is
        blocked; let both go and wait for both. `first_parked`/`release` replace the seam for a
        first party stalled inside SQL (see `stall`)."""
        is_parked = first_parked or (lambda party: party.parked.is_set())
        first.thread.start()
        wait_until(lambda: is_parked(first) or first.done.is_set(), TIMEOUT, message=f"{first.name} to park")
        assert not first.done.is_set(), f"{first.name} ended before its seam: {first.error!r}"
        second.thread.start()
        wait_until(
            lambda: second.parked.is_set() or second.done.is_set() or self.blocked(second, by=first),
            TIMEOUT,
            message=f"{second.name} to park, end or wait for {first.name}",
        )
        self.second_ended_first = second.done.is_set()  # it committed while the first still held its place
        first.go.set()
        second.go.set()
        if release is not None:
            release()
        for party in (first, second):
            party.thread.join(TIMEOUT)
            assert party.done.is_set(), f"{party.name} did not finish"

    @contextmanager
    def stall(self) -> Iterator[str]:
        """An SQL statement that waits until the race lets its party go: a stall between two
        statements of one PostgreSQL transaction, where Python has no seam (a pipeline)."""
        key = uuid.uuid4().int % 2**31
        self._monitor.execute("SELECT pg_advisory_lock(%s, 0)", (key,))
        try:
            yield f"SELECT pg_advisory_xact_lock_shared({key}, 0)"
        finally:
            self._monitor.execute("SELECT pg_advisory_unlock_all()")

    def release_stall(self) -> None:
        self._monitor.execute("SELECT pg_advisory_unlock_all()")


def track(store: Any, *, begin_immediate: bool = True) -> None:
    """Let the race see each party's transaction: its backend pid on PostgreSQL, its wait for
    the write lock on SQLite; with `begin_immediate=False` SQLite's writes BEGIN deferred (the
    mutation of its one serialisation mechanism)."""
    real = store._connection
    if store.url.startswith("sqlite"):
        store._connection = lambda: _SqliteConnection(real(), begin_immediate)
        return

    @contextmanager
    def connection() -> Iterator[Any]:
        with real() as pooled:
            party = current()
            if party is not None:
                party.pid = pooled.info.backend_pid
            yield pooled

    store._connection = connection


def stall_query(store: Any, party: Party, name: str, stall: str) -> None:
    """`party`'s transaction runs `stall` in place of the block `name` (everyone else's, the block)."""
    store._queries = _PartyQueries(store._queries, party, {name: stall})


class _PartyQueries(dict):  # type: ignore[type-arg]
    def __init__(self, queries: dict[str, str], party: Party, overrides: dict[str, str]) -> None:
        super().__init__(queries)
        self._party = party
        self._overrides = overrides

    def __getitem__(self, name: str) -> str:
        if current() is self._party and name in self._overrides:
            return self._overrides[name]
        return super().__getitem__(name)


def remove_query(store: Any, name: str) -> None:
    """The mutation of a PostgreSQL mechanism: its block becomes a statement that does nothing."""
    assert name in store._queries, name
    store._queries = {**store._queries, name: "SELECT 1"}


class _SqliteConnection:
    """A SQLite connection that marks its party while `BEGIN IMMEDIATE` waits for the write lock."""

    def __init__(self, connection: Any, begin_immediate: bool) -> None:
        self._connection = connection
        self._begin_immediate = begin_immediate

    def execute(self, sql: str, *args: Any) -> Any:
        if sql != "BEGIN IMMEDIATE":
            return self._connection.execute(sql, *args)
        if not self._begin_immediate:
            return self._connection.execute("BEGIN")
        party = current()
        if party is None:
            return self._connection.execute(sql)
        party.in_begin_immediate = True
        try:
            return self._connection.execute(sql)
        finally:
            party.in_begin_immediate = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._connection, name)
