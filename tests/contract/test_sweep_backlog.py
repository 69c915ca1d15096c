"""A sweep's work does not grow with the queued backlog (SQLite).

The sweep runs every few seconds in every worker, inside the one writer's
transaction, so a sweep that reads every run holds every claim back for as long
as it reads. Ordered by the key index, SQLite walked the whole runs table to
return the lost running runs in id order: 1.1 s beside 1,000,000 queued runs,
which held the drain to a third of its rate in one backlog sitting
(benchmarks/backlog.py). The same statement must read the running runs only.
PostgreSQL's plan for it is pinned beside a large backlog in test_plan_cache.py
(`sweep_lost` in HOT).

The measure is SQLite's own count of virtual machine steps (a progress handler
called every 100 steps), not time: it is the same on a loaded machine.
"""

from __future__ import annotations

import sqlite3
import time

from tidegate.bootstrap import open_store
from tidegate.storage.shared.sqlfile import load_queries
from tidegate.storage.urls import parse_database_url

from .conftest import enqueue_one

QUERIES = load_queries("tidegate.storage.sqlite")
BACKLOG = 20_000
PER_CALL = 100


def sweep_steps(path: str) -> int:
    """Hundreds of VM steps one `sweep_lost` takes on the file at `path`."""
    calls = 0

    def counted() -> int:
        nonlocal calls
        calls += 1
        return 0

    with sqlite3.connect(path) as connection:
        connection.set_progress_handler(counted, PER_CALL)
        connection.execute(QUERIES["sweep_lost"], {"now": time.time()}).fetchall()
    return calls


def test_the_sweep_reads_the_running_runs_not_the_queued_backlog(sqlite_url: str) -> None:
    store = open_store(sqlite_url)
    try:
        enqueue_one(store)
    finally:
        store.close()
    path = str(parse_database_url(sqlite_url).path)
    shallow = sweep_steps(path)
    with sqlite3.connect(path) as connection:
        columns = [row[1] for row in connection.execute("PRAGMA table_info(tidegate_runs)")]
        others = ", ".join(f"t.{name}" for name in columns[1:])
        connection.execute(
            f"WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < {BACKLOG}) "
            f"INSERT INTO tidegate_runs ({', '.join(columns)}) SELECT t.id || '-' || g.n, {others} "
            "FROM tidegate_runs AS t CROSS JOIN g"
        )
    deep = sweep_steps(path)
    steps = f"{deep * PER_CALL} VM steps beside {BACKLOG} queued runs, {shallow * PER_CALL} beside one"
    assert deep <= shallow + 2, f"the sweep took {steps}"
