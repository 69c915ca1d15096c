"""Submitting in the caller's transaction (issue 26): `options(connection=...)` on both adapters."""

import asyncio
import sqlite3
import threading

import psycopg
import pytest

from tidegate import AdmissionRejected, InvalidArgument, RunNotFound, RunStatus, Unique

from .conftest import execute_sql


def _connect(database_url, **options):
    """The user's own connection to the app's database, as their code would open it."""
    if database_url.startswith("sqlite"):
        return sqlite3.connect(database_url[len("sqlite:///") :], timeout=30, **options)
    return psycopg.connect(database_url, **options)


def _count(database_url, table):
    return execute_sql(database_url, f"SELECT count(*) FROM {table}")[0][0]


def test_commit_makes_the_run_visible_and_wakes_a_waiting_worker(app, database_url, start_worker):
    @app.task(name="t.receipt")
    def receipt(order_id: int) -> int:
        return order_id

    execute_sql(database_url, "CREATE TABLE orders (id integer)")
    start_worker(poll_interval="1h")  # only a wake-up can start the run: the backstop poll is an hour away
    # The worker's turns are over once a run it completed reads so (its outcome and its next claim
    # share a cycle): from here on only a wake-up makes it read the queue again.
    assert receipt.submit(order_id=0).wait(timeout="60s") == 0
    connection = _connect(database_url)
    try:
        connection.execute("INSERT INTO orders (id) VALUES (7)")
        handle = receipt.options(connection=connection).submit(order_id=7)
        with pytest.raises(RunNotFound):
            handle.info()  # not committed: invisible to the store and its workers
        connection.commit()
        # Generous for a stalled machine, and still far below the poll: only the commit's wake-up
        # can explain a start within it (without it the wait times out).
        assert handle.wait(timeout="60s") == 7
    finally:
        connection.close()
    assert _count(database_url, "orders") == 1


def test_rollback_leaves_no_run_event_or_key(app, database_url):
    @app.task(name="t.keyed", unique=Unique(by_args=["k"]))
    def keyed(k: int) -> None:
        return None

    app.declare()
    connection = _connect(database_url)
    try:
        first = keyed.options(connection=connection).submit(k=1)
        again = keyed.options(connection=connection).submit(k=1)
        assert again.id == first.id and again.duplicate  # the key holds inside the transaction
        connection.rollback()
    finally:
        connection.close()
    for table in ("tidegate_runs", "tidegate_events", "tidegate_unique_keys"):
        assert _count(database_url, table) == 0, table
    assert not keyed.submit(k=1).duplicate  # the rolled-back run never held the key


def test_a_ceiling_holds_inside_the_callers_transaction(app, database_url):
    app.queue("t.capped", max_active=2)

    @app.task(name="t.capped_job", queue="t.capped")
    def job(n: int) -> None:
        return None

    app.declare()
    connection = _connect(database_url)
    other: list[object] = []
    try:
        job.options(connection=connection).submit_many([{"n": 1}, {"n": 2}])
        with pytest.raises(AdmissionRejected):
            job.options(connection=connection).submit(n=3)  # counts the transaction's own runs
        # Another submitter waits for the ceiling's lock, which the open transaction holds.
        thread = threading.Thread(target=lambda: _record(other, lambda: job.submit(n=4)))
        thread.start()
        thread.join(timeout=0.5)
        assert thread.is_alive(), "a submit past the ceiling went through while the transaction held it"
        connection.commit()  # the refusal above left the transaction usable: its two runs commit
        thread.join(timeout=30)
    finally:
        connection.close()
    assert len(other) == 1 and isinstance(other[0], AdmissionRejected)
    assert sorted(run.args["n"] for run in app.store.page_runs()) == [1, 2]


def _record(into, call):
    try:
        into.append(call())
    except Exception as error:
        into.append(error)


def test_a_connection_of_the_wrong_kind_or_database_is_refused(app, database_url, backend, tmp_path):
    @app.task(name="t.plain")
    def plain() -> None:
        return None

    app.declare()
    wrong = [object()]
    if backend == "sqlite":
        wrong.append(sqlite3.connect(tmp_path / "other.db"))
        wrong.append(sqlite3.connect(":memory:"))
        autocommit = sqlite3.connect(database_url[len("sqlite:///") :], isolation_level=None)
        messages = ["takes a sqlite3.Connection", "other.db", "in-memory", "autocommit"]
    else:
        wrong.append(sqlite3.connect(tmp_path / "other.db"))
        wrong.append(psycopg.connect(database_url.split("?")[0]))  # the same database, another schema
        autocommit = psycopg.connect(database_url, autocommit=True)
        messages = ["takes a psycopg.Connection", "takes a psycopg.Connection", "schema", "autocommit"]
    for connection, message in zip([*wrong, autocommit], messages, strict=True):
        with pytest.raises(InvalidArgument, match=message):
            plain.options(connection=connection).submit()
        if hasattr(connection, "close"):
            connection.close()
    assert _count(database_url, "tidegate_runs") == 0


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_a_repeatable_read_transaction_is_refused(app, database_url):
    @app.task(name="t.rr")
    def rr() -> None:
        return None

    app.declare()
    with psycopg.connect(database_url) as connection:
        connection.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        with pytest.raises(InvalidArgument, match="read committed"):
            rr.options(connection=connection).submit()
    assert _count(database_url, "tidegate_runs") == 0


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_submit_async_in_the_callers_async_transaction(app, database_url):
    @app.task(name="t.async_tx", unique=Unique())
    def job(x: int) -> None:
        return None

    async def main():
        async with await psycopg.AsyncConnection.connect(database_url) as connection:
            first = await job.options(connection=connection).submit_async(x=1)
            second = await app.submit_async("t.async_tx", {"x": 1}, connection=connection)
            with pytest.raises(RunNotFound):
                await first.info_async()
            await connection.commit()
        status = await first.status_async()
        await app.aclose()
        return first, second, status

    first, second, status = asyncio.run(main())
    assert second.id == first.id and second.duplicate and status is RunStatus.QUEUED


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_sqlite_asks_for_the_declarations_before_a_transaction_holds_the_writer(app, database_url):
    @app.task(name="t.first_use")
    def first_use() -> None:
        return None

    execute_sql(database_url, "CREATE TABLE t (x integer)")
    assert app.store.page_runs() == []  # the store is open (an app's start-up), its declarations not yet written
    connection = _connect(database_url)
    try:
        connection.execute("INSERT INTO t (x) VALUES (1)")  # the caller's transaction now holds the one writer
        with pytest.raises(InvalidArgument, match=r"app\.declare"):
            first_use.options(connection=connection).submit()
        connection.rollback()
        app.declare()
        first_use.options(connection=connection).submit()
        connection.commit()
    finally:
        connection.close()
    assert _count(database_url, "tidegate_runs") == 1


@pytest.mark.parametrize("caller_wrote_first", [False, True], ids=["submit_opens", "caller_open"])
def test_a_refused_keyed_submit_leaves_the_callers_transaction_as_it_was(app, database_url, caller_wrote_first):
    """The key is taken before the ceiling refuses the run: what undoes it is the savepoint in the
    caller's open transaction, or (SQLite, no transaction open) the rollback of the transaction the
    submit opened. Either taken out, the key row commits with the caller's next commit."""
    app.queue("t.full", max_active=1)

    @app.task(name="t.full_keyed", queue="t.full", unique=Unique(by_args=["k"]))
    def keyed(k: int) -> None:
        return None

    execute_sql(database_url, "CREATE TABLE notes (id integer)")
    keyed.submit(k=1)  # the queue's one place taken
    connection = _connect(database_url)
    try:
        if caller_wrote_first:
            connection.execute("INSERT INTO notes (id) VALUES (1)")
        with pytest.raises(AdmissionRejected):
            keyed.options(connection=connection).submit(k=2)
        if database_url.startswith("sqlite"):
            assert connection.in_transaction is caller_wrote_first  # a transaction it opened is over
        connection.commit()
    finally:
        connection.close()
    assert _count(database_url, "tidegate_unique_keys") == 1
    assert _count(database_url, "tidegate_runs") == 1
    assert _count(database_url, "notes") == int(caller_wrote_first)


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_file_checked_once_does_not_let_another_file_through(app, database_url, tmp_path):
    """The caller's file is checked once per name (submits.py): the name of the store's file is
    remembered, never a connection, so another file is still refused after a good submit."""

    @app.task(name="t.files")
    def files() -> None:
        return None

    app.declare()
    good = _connect(database_url)
    other = sqlite3.connect(tmp_path / "other.db")
    try:
        for _ in range(2):
            files.options(connection=good).submit()
            good.commit()
        with pytest.raises(InvalidArgument, match=r"other\.db"):
            files.options(connection=other).submit()
    finally:
        good.close()
        other.close()
    assert _count(database_url, "tidegate_runs") == 2
