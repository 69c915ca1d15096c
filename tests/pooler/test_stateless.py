"""What a transaction-mode pooler needs of tidegate: nothing left in a server session.

Through PgBouncer in transaction mode, consecutive transactions of one client
run on whichever server session is free, and a session keeps what the last
client set in it. These pin that a pooled store's time is its own clock's
(never a setting another client left behind), that it prepares nothing, that
wake-ups go to the direct URL (or, lacking it, are left to the polls, said
once), and that a bad declaration is one line naming it.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time

import psycopg
import pytest

from tests.conftest import raw_store
from tests.contract.conftest import new_run
from tests.contract.test_submit_free import _variant
from tests.contract.test_submit_round_trips import keyed
from tests.pooler.pgbouncer import PgBouncer
from tidegate.domain.clock import ShiftedClock
from tidegate.domain.errors import ConfigurationError
from tidegate.domain.model import CycleRequest
from tidegate.storage.postgres import pooler
from tidegate.storage.postgres.listener import PollOnly
from tidegate.storage.postgres.pooler import clocked_sql, endpoint


def test_each_pooled_store_reads_its_own_clock_whatever_the_server_session_kept(pgbouncer: PgBouncer):
    """A moved clock's offset travels in its statements: a store on the system clock sharing the
    pooler's server sessions still stamps the server's time (a session offset would follow it)."""
    ahead, plain = ShiftedClock(), ShiftedClock()
    shifted, system = raw_store(pgbouncer.url, ahead), raw_store(pgbouncer.url, plain)
    try:
        shifted.migrate()
        ahead.advance(3600)
        for _ in range(5):  # alternate: the pooler hands the last server session to the next client
            shifted.enqueue([new_run()])
            run = new_run()
            system.enqueue([run])
            stamped = system.get_run(run.id).submitted_at.timestamp()
            assert abs(stamped - time.time()) < 600, "the system clock's store read another client's offset"
        later = new_run()
        shifted.enqueue([later])
        assert shifted.get_run(later.id).submitted_at.timestamp() > time.time() + 3000
    finally:
        shifted.close()
        system.close()


@pytest.mark.parametrize("removed", [False, True], ids=["intact", "removed"])
def test_the_free_submit_stamps_the_callers_clock_not_the_sessions(pgbouncer: PgBouncer, removed: bool):
    """tidegate_enqueue_free (migration 0027) is given the time by its caller, whose clock's offset the
    pooled adapter writes into the call. Removed (the function's body reads tidegate_now() itself), it
    reads the server session's setting, which a pooled store never sets: a moved clock is lost."""
    clock = ShiftedClock()
    store = raw_store(pgbouncer.url, clock)
    try:
        store.migrate()
        store.enqueue([new_run()])  # reads the ceilings (none): the next submit is the one statement
        if removed:
            body_clock = _variant(
                store, "session_clock", lambda text: re.sub(r"p_now\b(?! timestamp)", "tidegate_now()", text)
            )
            store._queries = {**store._queries, "enqueue_free": body_clock}  # type: ignore[attr-defined]
        clock.advance(3600)
        run = new_run()
        store.enqueue([run])
        ahead = store.get_run(run.id).submitted_at.timestamp() > time.time() + 3000
        assert ahead is not removed
    finally:
        store.close()


def test_a_pooled_store_prepares_nothing_and_sets_nothing_in_the_session(pgbouncer: PgBouncer, postgres_url: str):
    clock = ShiftedClock()
    store = raw_store(pgbouncer.url, clock)
    try:
        store.migrate()
        clock.advance(60)
        for _ in range(4):  # past any prepare threshold
            store.enqueue([new_run()])
            store.cycle(CycleRequest("w1", ["contract"], [], [], 1, 30))
        with psycopg.connect(pgbouncer.url.partition("?")[0], autocommit=True) as connection:
            prepared = connection.execute("SELECT count(*) FROM pg_prepared_statements").fetchone()
            offset = connection.execute("SELECT current_setting('tidegate.clock_offset', true)").fetchone()
        assert prepared == (0,) and offset in ((None,), ("",))
    finally:
        store.close()


def test_an_async_submit_through_the_pooler_prepares_nothing_and_reads_its_own_clock(pgbouncer: PgBouncer):
    """The event loop's pool is the sync pool's kind: the URL without tidegate's parameter, nothing
    prepared, no session offset (the statements or the transaction carry it), the full way too."""
    clock = ShiftedClock()
    store = raw_store(pgbouncer.url, clock)
    try:
        store.migrate()
        clock.advance(3600)
        free, full = new_run(), keyed("replaced", on_conflict="replace")  # a replacing key goes the full way

        async def submits() -> None:
            for _ in range(4):  # past any prepare threshold
                await store.submits.enqueue_async([new_run()])
            await store.submits.enqueue_async([free])
            await store.submits.enqueue_async([full])
            await store.submits.aclose()

        asyncio.run(submits())
        with psycopg.connect(pgbouncer.url.partition("?")[0], autocommit=True) as connection:
            prepared = connection.execute("SELECT count(*) FROM pg_prepared_statements").fetchone()
            offset = connection.execute("SELECT current_setting('tidegate.clock_offset', true)").fetchone()
        assert prepared == (0,) and offset in ((None,), ("",))
        for run in (free, full):
            assert store.get_run(run.id).submitted_at.timestamp() > time.time() + 3000, run
    finally:
        store.close()


def test_wake_ups_listen_on_the_direct_url(pgbouncer: PgBouncer, postgres_url: str):
    store = raw_store(pgbouncer.url)
    try:
        assert store._db.listen_url == postgres_url
    finally:
        store.close()


def test_without_a_direct_url_wake_ups_are_left_to_the_polls_said_once(
    pgbouncer: PgBouncer, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
):
    monkeypatch.delenv("TIDEGATE_DATABASE_DIRECT")
    monkeypatch.setattr(pooler, "_warned", set())
    store = raw_store(pgbouncer.url)
    try:
        with caplog.at_level(logging.WARNING):
            listeners = [store.listen(lambda: None), store.listen(lambda: None)]
        assert all(isinstance(listener, PollOnly) for listener in listeners)
        warnings = [
            message for record in caplog.records if "TIDEGATE_DATABASE_DIRECT" in (message := record.getMessage())
        ]
        assert len(warnings) == 1, warnings
    finally:
        store.close()


@pytest.mark.parametrize(
    "query", ["tidegate_pooler=session", "tidegate_pooler=", "tidegate_pooler=transaction&tidegate_pooler=transaction"]
)
def test_a_bad_pooler_declaration_is_one_line_naming_it(query: str):
    with pytest.raises(ConfigurationError, match="tidegate_pooler must be given once, as transaction") as raised:
        endpoint(f"postgresql://u:secret@h/db?{query}", {})
    assert "\n" not in str(raised.value) and "secret" not in str(raised.value)


def test_a_direct_url_that_is_not_postgresql_is_refused():
    with pytest.raises(ConfigurationError, match=r"TIDEGATE_DATABASE_DIRECT 'sqlite:///x\.db' is not a postgresql"):
        endpoint("postgresql://h/db?tidegate_pooler=transaction", {"TIDEGATE_DATABASE_DIRECT": "sqlite:///x.db"})


def test_the_pooler_parameter_is_removed_and_the_rest_kept():
    found = endpoint("postgresql://h/db?sslmode=disable&tidegate_pooler=transaction&application_name=a", {})
    kept = "postgresql://h/db?sslmode=disable&application_name=a"
    assert (found.url, found.pooled, found.listen_url) == (kept, True, None)
    plain = "postgresql://h/db?sslmode=disable"
    direct = endpoint(plain, {"TIDEGATE_DATABASE_DIRECT": "postgresql://d/db"})
    assert (direct.url, direct.pooled, direct.listen_url) == (plain, False, plain)


def test_the_offset_is_written_where_the_clock_is_read():
    text = "SELECT tidegate_now(), tidegate_statement_timestamp()"
    assert clocked_sql(text, 0.0) == "SELECT (now()), (statement_timestamp())"
    assert clocked_sql(text, -2.5) == (
        "SELECT (now() + make_interval(secs => (-2.5)::double precision)),"
        " (statement_timestamp() + make_interval(secs => (-2.5)::double precision))"
    )


def test_a_pooled_database_that_does_not_default_to_read_committed_is_refused(postgres_url: str):
    schema = postgres_url.rpartition("%3D")[2]
    bouncer = PgBouncer("127.0.0.1", 5432, "test", schema, "SET default_transaction_isolation = serializable")
    try:
        with pytest.raises(ConfigurationError, match="runs transactions at 'serializable' by default"):
            raw_store(bouncer.url)
    finally:
        bouncer.stop()
