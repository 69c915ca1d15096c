"""Async submit and wait (issue 26): from one event loop, by the sync submit's checks, on both adapters."""

import asyncio
import uuid

import psycopg
import pytest

from tidegate import AdmissionRejected, DuplicateRun, InvalidArgument, RunStatus, Unique, WaitTimeout
from tidegate.storage.postgres.connections import POOL_MAX_SIZE


def test_many_concurrent_async_submits_and_waits_from_one_loop(app, start_worker):
    @app.task(name="a.add")
    def add(a: int, b: int) -> int:
        return a + b

    start_worker(max_workers=8)

    async def main():
        handles = await asyncio.gather(*[add.submit_async(a=i, b=1) for i in range(60)])
        handles += await add.submit_many_async([{"a": 100, "b": 1}, {"a": 200, "b": 1}])
        by_name = await app.submit_async("a.add", {"a": 5, "b": 5})
        results = await asyncio.gather(*[handle.wait_async(timeout=30) for handle in [*handles, by_name]])
        statuses = {await handle.status_async() for handle in handles}
        await app.aclose()
        return results, statuses

    results, statuses = asyncio.run(main())
    assert results == [i + 1 for i in range(60)] + [101, 201, 10]
    assert statuses == {RunStatus.COMPLETED}


def test_async_submit_keeps_the_checks_and_the_admission_ceiling(app):
    app.queue("a.capped", max_active=3)

    @app.task(name="a.job", queue="a.capped", unique=Unique(by_args=["key"], on_conflict="raise"))
    def job(key: int) -> None:
        return None

    async def main():
        with pytest.raises(InvalidArgument):
            await job.submit_async(key=object())  # not JSON: refused before the store
        outcomes = await asyncio.gather(*[job.submit_async(key=i) for i in range(10)], return_exceptions=True)
        with pytest.raises(DuplicateRun) as duplicate:
            await job.submit_async(key=next(i for i, o in enumerate(outcomes) if not isinstance(o, Exception)))
        await app.aclose()
        return outcomes, duplicate.value

    outcomes, duplicate = asyncio.run(main())
    stored = [outcome for outcome in outcomes if not isinstance(outcome, Exception)]
    refused = [outcome for outcome in outcomes if isinstance(outcome, Exception)]
    assert len(stored) == 3 and all(isinstance(error, AdmissionRejected) for error in refused)
    assert duplicate.handle.id in {handle.id for handle in stored} and duplicate.handle.duplicate
    assert len(app.store.page_runs()) == 3


def test_async_duplicate_returns_the_existing_run_and_cancel_async_ends_it(app):
    @app.task(name="a.once", unique=Unique())
    def once(x: int) -> None:
        return None

    async def main():
        first, second = await asyncio.gather(once.submit_async(x=1), once.submit_async(x=1))
        status = await first.cancel_async()
        third = await once.submit_async(x=3)
        with pytest.raises(WaitTimeout):
            await third.wait_async(timeout="50ms")  # no worker: still queued at the deadline
        await app.aclose()
        return first, second, status

    first, second, status = asyncio.run(main())
    assert first.id == second.id and first.duplicate != second.duplicate
    assert status is RunStatus.CANCELED and app.run(first.id).status() is RunStatus.CANCELED


def test_canceling_the_awaiting_task_holds_no_connection(app, backend, database_url, monkeypatch):
    """Cancels are placed by events, never by timing: each wait is canceled once it has read at
    least once; on PostgreSQL, reads are canceled while the server holds them inside their
    statement (a lock the test holds), and the pool is then awaited until it is whole again."""

    @app.task(name="a.never")
    def never() -> None:
        return None

    async def main():
        handles = [await never.submit_async() for _ in range(20)]  # no worker: each wait goes on polling
        await _cancel_waits_after_their_first_read(app, handles, monkeypatch)
        if backend == "postgres":
            await _cancel_reads_inside_their_statements(app, handles, database_url)
        after = await handles[0].status_async()  # the pool still serves
        stats = await _settled_pool(app) if backend == "postgres" else {}
        await app.aclose()
        return after, stats

    after, stats = asyncio.run(main())
    assert after is RunStatus.QUEUED
    if backend == "postgres":
        assert stats["pool_size"] >= 1
        assert stats["pool_available"] == stats["pool_size"], stats  # every connection is back
        assert stats.get("requests_waiting", 0) == 0, stats


async def _cancel_waits_after_their_first_read(app, handles, monkeypatch):
    submits = app.store.submits
    real = submits.get_run_async
    read: set[str] = set()
    everyone_read = asyncio.Event()

    async def get_run_async(run_id):
        record = await real(run_id)
        read.add(run_id)
        if len(read) == len(handles):
            everyone_read.set()
        return record

    monkeypatch.setattr(submits, "get_run_async", get_run_async)
    waits = [asyncio.ensure_future(handle.wait_async()) for handle in handles]
    await asyncio.wait_for(everyone_read.wait(), 30)
    for wait in waits:
        wait.cancel()
    done = await asyncio.gather(*waits, return_exceptions=True)
    monkeypatch.setattr(submits, "get_run_async", real)
    assert all(isinstance(outcome, asyncio.CancelledError) for outcome in done)


async def _cancel_reads_inside_their_statements(app, handles, database_url):
    """Reads held by the server inside `get_run` (behind an advisory lock the test holds), canceled
    there once pg_stat_activity shows them waiting; then the lock is let go."""
    key = uuid.uuid4().int % 2**31
    stall = f"pg_advisory_xact_lock_shared({key}, 0)"
    queries = app.store._queries
    get_run = queries["get_run"].strip().rstrip(";")
    app.store._queries = {
        **queries,
        "get_run": f"WITH stall AS MATERIALIZED (SELECT {stall}) SELECT g.* FROM ({get_run}) AS g, stall",
    }
    monitor = await psycopg.AsyncConnection.connect(database_url, autocommit=True)
    try:
        await monitor.execute("SELECT pg_advisory_lock(%s, 0)", (key,))
        reads = [asyncio.ensure_future(handle.status_async()) for handle in handles]
        inside = min(len(reads), POOL_MAX_SIZE)
        await _until(lambda: _waiting_on(monitor, stall), inside)
        for read in reads:
            read.cancel()
        outcomes = await asyncio.gather(*reads, return_exceptions=True)
        assert all(isinstance(outcome, asyncio.CancelledError) for outcome in outcomes)
    finally:
        await monitor.execute("SELECT pg_advisory_unlock_all()")
        await monitor.close()
        app.store._queries = queries


async def _waiting_on(monitor, stall):
    cursor = await monitor.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE %s", (f"%{stall}%",)
    )
    return (await cursor.fetchone())[0]


async def _until(count, at_least):
    deadline = asyncio.get_running_loop().time() + 30.0
    while (seen := await count()) < at_least:
        assert asyncio.get_running_loop().time() < deadline, f"{seen} of {at_least} reads reached the server"
        await asyncio.sleep(0.01)


async def _settled_pool(app):
    """The calling loop's pool once a canceled connection's replacement (opened in the pool's own
    background) is in: every connection back and nobody waiting, or the last figures at the bound."""
    deadline = asyncio.get_running_loop().time() + 30.0
    while True:
        stats = app.store.submits.async_stats()
        settled = stats.get("pool_available") == stats.get("pool_size") and not stats.get("requests_waiting")
        if settled or asyncio.get_running_loop().time() > deadline:
            return stats
        await asyncio.sleep(0.01)
