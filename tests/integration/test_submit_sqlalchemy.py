"""Submitting in a SQLAlchemy transaction (issue 26): `options(connection=...)` takes a SQLAlchemy
Connection or Session (sync, both adapters) and an AsyncConnection or AsyncSession (PostgreSQL's
psycopg dialect), and writes on the driver connection under it, in the caller's transaction."""

import asyncio

import pytest

sqlalchemy = pytest.importorskip("sqlalchemy")

from sqlalchemy import text  # noqa: E402
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine  # noqa: E402
from sqlalchemy.orm import Session  # noqa: E402

from tidegate import InvalidArgument, RunNotFound, RunStatus, Unique  # noqa: E402

from .conftest import execute_sql  # noqa: E402


def _engine_url(database_url: str) -> str:
    """The app's database as SQLAlchemy names it: psycopg 3 on PostgreSQL, pysqlite on SQLite."""
    if database_url.startswith("sqlite"):
        return database_url
    return "postgresql+psycopg://" + database_url.split("://", 1)[1]


def _count(database_url, table):
    return execute_sql(database_url, f"SELECT count(*) FROM {table}")[0][0]


@pytest.fixture
def receipt(app, database_url):
    @app.task(name="sa.receipt", unique=Unique(by_args=["order_id"]))
    def receipt(order_id: int) -> int:
        return order_id

    execute_sql(database_url, "CREATE TABLE orders (id integer)")
    app.declare()  # SQLite: the declarations are written before a transaction holds the one writer
    return receipt


@pytest.mark.parametrize("kind", ["connection", "session"])
def test_a_sqlalchemy_commit_makes_the_run_visible_and_a_rollback_leaves_nothing(
    app, database_url, receipt, start_worker, kind
):
    engine = sqlalchemy.create_engine(_engine_url(database_url))
    try:
        with _opened(engine, kind) as caller:
            caller.execute(text("INSERT INTO orders (id) VALUES (1)"))
            rolled_back = receipt.options(connection=caller).submit(order_id=1)
            caller.rollback()
            with pytest.raises(RunNotFound):
                rolled_back.info()
            caller.execute(text("INSERT INTO orders (id) VALUES (7)"))
            handle = receipt.options(connection=caller).submit(order_id=7)
            again = receipt.options(connection=caller).submit(order_id=7)
            assert again.id == handle.id and again.duplicate  # the key holds inside the transaction
            with pytest.raises(RunNotFound):
                handle.info()  # not committed: invisible to the store and its workers
            caller.commit()
    finally:
        engine.dispose()
    start_worker()
    assert handle.wait(timeout="10s") == 7
    assert [row[0] for row in execute_sql(database_url, "SELECT id FROM orders")] == [7]
    assert _count(database_url, "tidegate_runs") == 1
    assert _count(database_url, "tidegate_unique_keys") == 1  # the rolled-back submit took no key


def test_a_submit_first_in_a_sqlalchemy_connection_commits_with_it(app, database_url, receipt):
    """No statement of the caller's before the submit: its transaction is begun for it, so the
    caller's commit() commits the run (SQLAlchemy's commit does nothing with no transaction begun)."""
    engine = sqlalchemy.create_engine(_engine_url(database_url))
    try:
        with engine.connect() as connection:
            handle = receipt.options(connection=connection).submit(order_id=3)
            connection.commit()
    finally:
        engine.dispose()
    assert handle.status() is RunStatus.QUEUED


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
@pytest.mark.parametrize("kind", ["connection", "session"])
def test_submit_async_in_a_sqlalchemy_async_transaction(app, database_url, receipt, kind):
    async def main():
        engine = create_async_engine(_engine_url(database_url))
        try:
            async with _opened_async(engine, kind) as caller:
                await caller.execute(text("INSERT INTO orders (id) VALUES (1)"))
                dropped = await receipt.options(connection=caller).submit_async(order_id=1)
                await caller.rollback()
                handle = await receipt.options(connection=caller).submit_async(order_id=2)
                duplicate = await app.submit_async("sa.receipt", {"order_id": 2}, connection=caller)
                with pytest.raises(RunNotFound):
                    await handle.info_async()
                await caller.commit()
            status = await handle.status_async()
            with pytest.raises(RunNotFound):
                await dropped.info_async()
        finally:
            await engine.dispose()
            await app.aclose()
        return handle, duplicate, status

    handle, duplicate, status = asyncio.run(main())
    assert duplicate.id == handle.id and duplicate.duplicate and status is RunStatus.QUEUED
    assert _count(database_url, "tidegate_runs") == 1


def test_a_sqlalchemy_async_wrapper_given_to_a_sync_submit_is_refused(app, database_url, receipt, backend):
    if backend == "sqlite":
        pytest.skip("an async SQLite engine needs aiosqlite, which tidegate does not take (its thread owns it)")

    async def main():
        engine = create_async_engine(_engine_url(database_url))
        try:
            async with engine.connect() as connection:
                with pytest.raises(InvalidArgument, match="AsyncConnection or AsyncSession with submit_async"):
                    receipt.options(connection=connection).submit(order_id=1)
        finally:
            await engine.dispose()

    asyncio.run(main())
    assert _count(database_url, "tidegate_runs") == 0


class _opened:
    """A SQLAlchemy Connection or Session of `engine`, closed on exit."""

    def __init__(self, engine, kind):
        self._caller = engine.connect() if kind == "connection" else Session(engine)

    def __enter__(self):
        return self._caller

    def __exit__(self, *exc):
        self._caller.close()


class _opened_async:
    def __init__(self, engine, kind):
        self._engine = engine
        self._kind = kind

    async def __aenter__(self):
        if self._kind == "connection":
            self._caller = await self._engine.connect()
        else:
            self._caller = AsyncSession(self._engine)
        return self._caller

    async def __aexit__(self, *exc):
        await self._caller.close()
