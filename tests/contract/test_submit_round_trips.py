"""What a submit costs the store: one round trip on every PostgreSQL path that one statement can
decide (issue 26), and the same answers on both adapters.

The counter is exact as the client sees the wire: a statement outside a pipeline waits for its
answer (a round trip); inside a pipeline nothing waits until a fetch of a statement not yet
answered or the pipeline's Sync at its end (each a round trip, answering everything sent
before). Statements are named by the store's queries (SAVEPOINT and the like by their text).

Pinned here, once the store has read the admission ceilings (none):
- a plain submit: `enqueue_free`, one statement, one round trip;
- a keyed one, new key or duplicate (or "raise"): `enqueue_unique_free` alone (a duplicate read
  in its snapshot; a new key written under the keys' locks it takes itself), one statement, one trip;
- in the caller's transaction: the first submit on a connection sends its check first inside a
  savepoint (two trips: the batch, the release); later ones the batch alone (one trip);
- from an event loop (the store's async pool, or the caller's async connection): the same.
SQLite has no round trips; its answers are pinned beside PostgreSQL's.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import psycopg
import pytest

from tidegate import DuplicateRun
from tidegate.domain.keys import ACTIVE_STATES, RunKey
from tidegate.storage.postgres.database import CONFIGURE
from tidegate.storage.postgres.pooler import clocked_sql, endpoint

from .conftest import new_run


class Trips:
    """Round trips and statements, counted as the client waits for the server.

    Only the submit's own: statements of the test's thread (the suite makes the next test's
    schema on a thread of its own meanwhile), and not a pooled connection's set-up (`CONFIGURE`),
    which a pool may run for a connection it opens or replaces at any moment."""

    def __init__(self) -> None:
        self.trips = 0
        self.statements: list[str] = []
        self._unanswered: set[int] = set()  # cursors whose statement went into a pipeline unanswered
        self._thread = threading.get_ident()

    def executed(self, cursor: Any, query: Any) -> None:
        text = query.decode() if isinstance(query, bytes) else str(query)
        if threading.get_ident() != self._thread or text == CONFIGURE:
            return
        self.statements.append(text)
        if cursor.connection._pipeline is None:
            self.trips += 1
        else:
            self._unanswered.add(id(cursor))

    def fetched(self, cursor: Any) -> None:
        if id(cursor) in self._unanswered:
            self.synced()

    def synced(self) -> None:
        self.trips += 1
        self._unanswered.clear()

    def named(self, queries: dict[str, str]) -> list[str]:
        """The statements by query name (others by their text); a pooled store's by the text it
        sends, with the system clock written in where the clock is read (pooler.clocked_sql)."""
        names = {clocked_sql(text, 0.0): name for name, text in queries.items()}
        names.update({text: name for name, text in queries.items()})
        return [names.get(statement, statement) for statement in self.statements]


@contextmanager
def counted(monkeypatch: pytest.MonkeyPatch) -> Iterator[Trips]:
    trips = Trips()
    for kind, pipeline, exit_name in (
        (psycopg.Cursor, psycopg.Pipeline, "__exit__"),
        (psycopg.AsyncCursor, psycopg.AsyncPipeline, "__aexit__"),
    ):
        _count_cursor(monkeypatch, kind, trips)
        real_exit = getattr(pipeline, exit_name)
        if exit_name == "__exit__":

            def exit_(self: Any, *args: Any, _real: Any = real_exit) -> Any:
                try:
                    return _real(self, *args)
                finally:
                    trips.synced()

        else:

            async def exit_(self: Any, *args: Any, _real: Any = real_exit) -> Any:
                try:
                    return await _real(self, *args)
                finally:
                    trips.synced()

        monkeypatch.setattr(pipeline, exit_name, exit_)
    yield trips
    monkeypatch.undo()


def _count_cursor(monkeypatch: pytest.MonkeyPatch, kind: type, trips: Trips) -> None:
    asynchronous = kind is psycopg.AsyncCursor
    real_execute = kind.execute
    if asynchronous:

        async def execute(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
            trips.executed(self, query)
            return await real_execute(self, query, *args, **kwargs)

    else:

        def execute(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
            trips.executed(self, query)
            return real_execute(self, query, *args, **kwargs)

    monkeypatch.setattr(kind, "execute", execute)
    for name in ("fetchone", "fetchall", "fetchmany"):
        real = getattr(kind, name)
        if asynchronous:

            async def fetch(self: Any, *args: Any, _real: Any = real, **kwargs: Any) -> Any:
                trips.fetched(self)
                return await _real(self, *args, **kwargs)

        else:

            def fetch(self: Any, *args: Any, _real: Any = real, **kwargs: Any) -> Any:
                trips.fetched(self)
                return _real(self, *args, **kwargs)

        monkeypatch.setattr(kind, name, fetch)


def keyed(key: str, on_conflict: str = "existing", **fields: Any):
    return replace(new_run(**fields), unique=RunKey(key, ACTIVE_STATES, None, on_conflict))


def callers_url(url: str) -> str:
    """The URL a caller's own connection takes: through a pooler, without tidegate's parameter."""
    return endpoint(url, {}).url


def _postgres_only(backend: str) -> None:
    if backend != "postgres":
        pytest.skip("round trips are PostgreSQL's; SQLite's answers are pinned by the test after each")


def test_a_plain_submit_is_one_statement_in_one_round_trip(store, backend, monkeypatch):
    _postgres_only(backend)
    store.enqueue([new_run()])  # reads the ceilings (none) on its way
    with counted(monkeypatch) as trips:
        store.enqueue([new_run()])
    assert (trips.trips, trips.named(store._queries)) == (1, ["enqueue_free"])


def test_a_keyed_submit_new_or_duplicate_is_one_statement_in_one_round_trip(store, backend, monkeypatch):
    _postgres_only(backend)
    store.enqueue_unique([keyed("warm")])
    first = keyed("k")
    with counted(monkeypatch) as new:
        [taken] = store.enqueue_unique([first])
    with counted(monkeypatch) as duplicate:
        [met] = store.enqueue_unique([keyed("k")])
    with counted(monkeypatch) as raised, pytest.raises(DuplicateRun) as error:
        store.enqueue_unique([keyed("k", on_conflict="raise")])
    assert (taken.run_id, taken.duplicate) == (first.id, False)
    assert (met.run_id, met.duplicate) == (first.id, True) and error.value.run_id == first.id
    for trips in (new, duplicate, raised):
        assert (trips.trips, trips.named(store._queries)) == (1, ["enqueue_unique_free"])
    assert len(store.page_runs()) == 2


def test_a_key_whose_holder_ended_is_taken_over_in_one_statement(store, backend, monkeypatch):
    """Its row names a run that holds it no longer (canceled): the one statement takes the row over
    (its guard: the row still names the run its snapshot judged), no second way."""
    store.enqueue_unique([keyed("warm")])
    ended = keyed("k")
    store.enqueue_unique([ended])
    store.cancel_run(ended.id)
    again = keyed("k")
    with counted(monkeypatch) as trips:
        [taken] = store.enqueue_unique([again])
    assert (taken.run_id, taken.duplicate) == (again.id, False)
    assert store.enqueue_unique([keyed("k")])[0].run_id == again.id  # the new run holds it
    if backend == "postgres":
        assert (trips.trips, trips.named(store._queries)) == (1, ["enqueue_unique_free"])


def test_a_keyed_run_keeps_its_rate_cost(store, database_url):
    """The one-statement keyed submit stores every column the plain one does (it once left out
    `rate_cost`: a keyed run of cost 5 was charged 1)."""
    store.enqueue_unique([keyed("warm")])
    heavy = replace(keyed("heavy"), rate_cost=5)
    store.enqueue_unique([heavy])
    from tests.conftest import execute_sql

    assert execute_sql(database_url, "SELECT rate_cost FROM tidegate_runs WHERE id = ?", (heavy.id,)) == [(5,)]


def test_the_one_statement_submits_fit_psycopgs_parse_cache():
    """psycopg keeps its parse of a statement (placeholders found, converted) only up to
    MAX_CACHED_STATEMENT_LENGTH bytes; a longer one is parsed again on every call, which cost a
    keyed submit about 100,000 client instructions (benchmarks/instructions.py, submit_unique)."""
    from psycopg._queries import MAX_CACHED_STATEMENT_LENGTH

    from tidegate.storage.shared.sqlfile import load_queries

    queries = load_queries("tidegate.storage.postgres")
    for name in ("enqueue_free", "enqueue_unique_free"):
        assert len(queries[name].encode()) <= MAX_CACHED_STATEMENT_LENGTH, name


def test_keyed_answers_that_one_statement_cannot_decide_are_the_same(store):
    """Both adapters: a batch with a new key and a held one stores only the new run; a replacing
    claim gives the queued holder its args; a "raise" among duplicates stores nothing."""
    held = keyed("held", args={"v": 1})
    store.enqueue_unique([held])
    fresh = keyed("fresh")
    answers = store.enqueue_unique([keyed("held"), fresh])
    assert [(a.run_id, a.duplicate) for a in answers] == [(held.id, True), (fresh.id, False)]
    [replaced] = store.enqueue_unique([keyed("held", on_conflict="replace", args={"v": 2})])
    assert (replaced.run_id, replaced.duplicate) == (held.id, True)
    assert store.get_run(held.id).args == {"v": 2}
    with pytest.raises(DuplicateRun):
        store.enqueue_unique([keyed("another"), keyed("held", on_conflict="raise")])
    assert sorted(run.id for run in store.page_runs()) == sorted([held.id, fresh.id])


def test_a_replacing_claim_goes_the_full_way_at_once(store, backend, monkeypatch):
    """No one-statement try first (it would find the holder and cost a round trip for nothing)."""
    _postgres_only(backend)
    store.enqueue_unique([keyed("r", args={"v": 1})])
    with counted(monkeypatch) as trips:
        store.enqueue_unique([keyed("r", on_conflict="replace", args={"v": 2})])
    assert "enqueue_unique_free" not in trips.named(store._queries)


def test_in_the_callers_transaction_the_check_comes_once_per_connection(store, backend, database_url, monkeypatch):
    _postgres_only(backend)
    store.enqueue([new_run()])
    with psycopg.connect(callers_url(database_url)) as other:  # the store reads its own database and schema once
        store.submits.enqueue_in(other, [new_run()])
    with psycopg.connect(callers_url(database_url)) as connection:
        connection.execute("SELECT 1")  # the caller's transaction is open before the submits
        first, second = new_run(), new_run()
        with counted(monkeypatch) as checked:
            store.submits.enqueue_in(connection, [first])
        with counted(monkeypatch) as known:
            store.submits.enqueue_in(connection, [second])
        connection.rollback()
        third = keyed("tx")
        with counted(monkeypatch) as keyed_trips:
            store.submits.enqueue_in(connection, [third])  # a new transaction of the checked connection
        connection.commit()
    queries = store._queries
    assert checked.named(queries) == [
        "SAVEPOINT tidegate_submit",
        "submit_in_check",
        "enqueue_free",
        "RELEASE SAVEPOINT tidegate_submit",
    ]
    assert checked.trips == 2
    assert (known.trips, known.named(queries)) == (1, ["enqueue_free"])
    assert (keyed_trips.trips, keyed_trips.named(queries)) == (1, ["enqueue_unique_free"])
    assert store.get_run(first.id) is None and store.get_run(second.id) is None  # rolled back
    assert store.get_run(third.id) is not None  # committed
    assert len(store.page_runs()) == 3  # the first run, the other connection's (committed on leaving), the third


def test_from_an_event_loop_a_submit_is_one_round_trip(store, backend, database_url, monkeypatch):
    _postgres_only(backend)

    async def main() -> tuple[Trips, Trips, Trips]:
        await store.submits.enqueue_async([new_run()])  # the loop's pool opened, the ceilings read
        await store.submits.enqueue_async([keyed("warm")])
        with counted(monkeypatch) as plain:
            await store.submits.enqueue_async([new_run()])
        with counted(monkeypatch) as unique:
            await store.submits.enqueue_async([keyed("a")])
        async with await psycopg.AsyncConnection.connect(callers_url(database_url)) as connection:
            await connection.execute("SELECT 1")
            await store.submits.enqueue_in_async(connection, [new_run()])  # the connection's check
            with counted(monkeypatch) as callers:
                await store.submits.enqueue_in_async(connection, [keyed("b")])
            await connection.commit()
        await store.submits.aclose()
        return plain, unique, callers

    plain, unique, callers = asyncio.run(main())
    queries = store._queries
    assert (plain.trips, plain.named(queries)) == (1, ["enqueue_free"])
    assert (unique.trips, unique.named(queries)) == (1, ["enqueue_unique_free"])
    assert (callers.trips, callers.named(queries)) == (1, ["enqueue_unique_free"])
    assert len(store.page_runs()) == 6


GUARD = "\nWHERE (u.key, u.run_id) IN (SELECT key, run_id FROM seen)"
LOCKS = "SELECT count(pg_advisory_xact_lock("
BEFORE_LOCKS = "), locked AS MATERIALIZED (\nSELECT CASE WHEN EXISTS (SELECT 1 FROM held) THEN false"
AFTER_KEYS = "), go AS MATERIALIZED (\nSELECT "


def _race_one_key(database_url: str, second_batch: int, mutate: Any, stall_at: Any) -> tuple[Any, Any, int]:
    """Two submits of the new key "k": the first one-statement, stalled where `stall_at` puts the
    race's stall into its text; the second `second_batch` runs of "k" (one: the one-statement way
    too; two sharing the key: the full way). `mutate` rewrites the statement for both parties.
    Returns both parties and the number of keyed runs stored."""
    from tests import races
    from tidegate.bootstrap import open_store

    store = open_store(database_url)
    try:
        store.enqueue_unique([keyed("warm")])  # the ceilings read: the submits go the one-statement way
        text = mutate(store._queries["enqueue_unique_free"])
        store._queries = {**store._queries, "enqueue_unique_free": text}
        first = races.Party("first", lambda: store.enqueue_unique([keyed("k")]))
        second = races.Party("second", lambda: store.enqueue_unique([keyed("k") for _ in range(second_batch)]))
        race = races.Race(database_url)
        try:
            races.track(store)
            with race.stall() as stall:
                races.stall_query(store, first, "enqueue_unique_free", stall_at(text, stall))
                race.run(first, second, first_parked=race.blocked, release=race.release_stall)
        finally:
            race.close()
        assert first.error is None and second.error is None, (first.error, second.error)
        return first, second, len(store.page_runs()) - 1  # the warm-up's run aside
    finally:
        store.close()


def _stalled_before_the_locks(text: str, stall: str) -> str:
    """The statement stalled once it has read the keys' rows in its snapshot (none), before the locks."""
    assert BEFORE_LOCKS in text
    waits = f"), stall AS MATERIALIZED (SELECT ({stall} WHERE s.n >= 0) FROM (SELECT count(*) AS n FROM seen) AS s"
    locks_after = BEFORE_LOCKS.replace("WHEN", "WHEN NOT EXISTS (SELECT 1 FROM stall) THEN false WHEN", 1)
    return text.replace(BEFORE_LOCKS, waits + locks_after, 1)


def _stalled_after_the_keys(text: str, stall: str) -> str:
    """The statement stalled once it has written the key (its locks held), before it commits."""
    assert AFTER_KEYS in text
    waits = f"), stall AS MATERIALIZED (SELECT ({stall} WHERE s.n >= 0) FROM (SELECT count(*) AS n FROM keyed) AS s"
    return text.replace(AFTER_KEYS, waits + AFTER_KEYS + "EXISTS (SELECT 1 FROM stall) AND ", 1)


@pytest.mark.race
@pytest.mark.parametrize("removed", [False, True], ids=["intact", "removed"])
def test_a_key_taken_since_the_snapshot_is_never_taken_from_its_run(database_url, backend, removed):
    """A mutation check of the fast path's guard: two one-statement submits of one new key, the
    first stalled after its snapshot read (no row for the key) and before its locks, while the
    second takes the key and commits. The first's insert meets the second's row, which its
    snapshot never saw: with the guard (ON CONFLICT takes over only the row `seen` judged) it
    writes nothing and, the full way, answers the second's run as a duplicate; without it, it takes
    the key over and both store a run."""
    if backend != "postgres":
        pytest.skip("the race needs a statement to stall in: PostgreSQL's (SQLite's one writer is raced elsewhere)")

    def mutate(text: str) -> str:
        assert GUARD in text
        return text.replace(GUARD, "") if removed else text

    first, second, keyed_runs = _race_one_key(database_url, 1, mutate, _stalled_before_the_locks)
    assert keyed_runs == (2 if removed else 1), (first.result, second.result)
    if not removed:
        assert first.result[0] == replace(second.result[0], duplicate=True)


@pytest.mark.race
@pytest.mark.parametrize("removed", [False, True], ids=["intact", "removed"])
def test_the_one_statement_keyed_submit_is_serialised_with_the_full_way_by_its_key_lock(database_url, backend, removed):
    """A mutation check of the fast path's lock: a one-statement submit of a new key stalled once
    it has written the key (not yet committed), and a batch of two runs of that key, which goes
    the full way (lock, holders, store, take). With the fast path's locks the batch waits for them
    and reads the first's run as the holder; without them it reads no holder (the first's row is
    uncommitted), stores a run and takes the key over once the first commits: two runs."""
    if backend != "postgres":
        pytest.skip("the race needs a statement to stall in: PostgreSQL's (SQLite's one writer is raced elsewhere)")

    def mutate(text: str) -> str:
        assert LOCKS in text
        return text.replace(LOCKS, "SELECT count((") if removed else text

    first, second, keyed_runs = _race_one_key(database_url, 2, mutate, _stalled_after_the_keys)
    assert keyed_runs == (2 if removed else 1), (first.result, second.result)
    if not removed:
        assert [answer.run_id for answer in second.result] == [first.result[0].run_id] * 2


def test_a_duplicate_locks_no_row_and_a_new_key_locks_the_rules_version(store, backend, database_url):
    """The version row is read FOR SHARE only when the batch may be stored: a batch of duplicates
    writes nothing and locks nothing (it commits with no WAL flush, as cheap as a read)."""
    _postgres_only(backend)
    from tests.conftest import execute_sql

    def locker() -> str:
        return execute_sql(database_url, "SELECT xmax::text FROM tidegate_settings WHERE name = 'rules_version'")[0][0]

    store.enqueue_unique([keyed("d")])
    before = locker()
    store.enqueue_unique([keyed("d")])  # a duplicate
    assert locker() == before
    store.enqueue_unique([keyed("e")])  # a new key: the version is read FOR SHARE
    assert locker() != before
