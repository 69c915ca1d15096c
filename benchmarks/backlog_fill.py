"""Deep backlogs made fast, and the drain rate of the first runs a worker takes from them.

Submitting a million runs one `submit_many` at a time would take minutes, so a
benchmark submits a few template runs through tidegate (every column and the
RunQueued event as tidegate writes them) and the database copies each of them
in one INSERT ... SELECT. A copy's id is its copy number, zero-padded, before
the template's id: copies sort before the templates and round-robin across
them (copy 1 of every template, then copy 2, ...), as interleaved arrivals
would, and are written in that order, so that the tables lie in claim order as
runs that arrived over time do. The drain is then timed on the first `count` completions only, from
the database's own event times, so a backlog of a million costs minutes to
fill, not to drain.
"""

from __future__ import annotations

import sqlite3
import time

import psycopg

import tidegate
from storage_sizes import sqlite_path

PG_COPY_RUNS = """
INSERT INTO tidegate_runs ({columns})
SELECT lpad(g::text, 8, '0') || t.id, {others}
FROM tidegate_runs AS t CROSS JOIN generate_series(1, %(copies)s) AS g
WHERE t.queue = %(queue)s AND t.status = 'queued'
ORDER BY g, t.id
"""
PG_COPY_EVENTS = """
INSERT INTO tidegate_events (run_id, step_key, type, metadata, at)
SELECT lpad(g::text, 8, '0') || e.run_id, e.step_key, e.type, e.metadata, e.at
FROM tidegate_events AS e JOIN tidegate_runs AS t ON t.id = e.run_id
CROSS JOIN generate_series(1, %(copies)s) AS g
WHERE t.queue = %(queue)s AND t.status = 'queued' AND e.type = 'RunQueued'
ORDER BY g, e.run_id
"""
SQLITE_SERIES = "WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < :copies) "
SQLITE_COPY_RUNS = (
    SQLITE_SERIES + "INSERT INTO tidegate_runs ({columns}) SELECT printf('%08d', g.n) || t.id, {others} "
    "FROM tidegate_runs AS t CROSS JOIN g WHERE t.queue = :queue AND t.status = 'queued' ORDER BY g.n, t.id"
)
SQLITE_COPY_EVENTS = (
    SQLITE_SERIES + "INSERT INTO tidegate_events (run_id, step_key, type, metadata, at) "
    "SELECT printf('%08d', g.n) || e.run_id, e.step_key, e.type, e.metadata, e.at "
    "FROM tidegate_events AS e JOIN tidegate_runs AS t ON t.id = e.run_id CROSS JOIN g "
    "WHERE t.queue = :queue AND t.status = 'queued' AND e.type = 'RunQueued' ORDER BY g.n, e.run_id"
)


def copy_queued(url: str, queue: str, copies: int) -> None:
    """Add `copies` copies of every queued run of `queue` (runs and their RunQueued events), in one transaction."""
    if copies <= 0:
        return
    if url.startswith("sqlite"):
        with sqlite3.connect(sqlite_path(url)) as connection:
            columns = [row[1] for row in connection.execute("PRAGMA table_info(tidegate_runs)")]
            others = ", ".join(f"t.{name}" for name in columns[1:])
            parameters = {"copies": copies, "queue": queue}
            connection.execute(SQLITE_COPY_EVENTS, parameters)  # before the runs: it joins the templates only
            connection.execute(SQLITE_COPY_RUNS.format(columns=", ".join(columns), others=others), parameters)
        return
    with psycopg.connect(url) as connection:
        columns = [
            row[0]
            for row in connection.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema()"
                " AND table_name = 'tidegate_runs' ORDER BY ordinal_position"
            )
        ]
        if columns[0] != "id":
            raise SystemExit(f"expected tidegate_runs to start with id, found {columns[0]}")
        others = ", ".join(f"t.{name}" for name in columns[1:])
        parameters = {"copies": copies, "queue": queue}
        connection.execute(PG_COPY_EVENTS, parameters)
        connection.execute(PG_COPY_RUNS.format(columns=", ".join(columns), others=others), parameters)
        # This schema's tables only: a database-wide ANALYZE also locks the catalogs and other schemas'
        # tables, in an order that deadlocks with another one running beside it (tests run in parallel).
        tables = connection.execute("SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")
        connection.execute("ANALYZE " + ", ".join(f'"{table}"' for (table,) in tables.fetchall()))


def last_event(url: str) -> int:
    return int(_one(url, "SELECT coalesce(max(id), 0) FROM tidegate_events", {}))


def completed_since(url: str, mark: int) -> int:
    return int(
        _one(url, "SELECT count(*) FROM tidegate_events WHERE id > :mark AND type = 'RunCompleted'", {"mark": mark})
    )


def window(url: str, mark: int, count: int) -> float:
    """Seconds from the first claim after `mark` to the `count`-th completion after it."""
    epoch = "at" if url.startswith("sqlite") else "extract(epoch FROM at)::float8"
    first = _one(
        url, f"SELECT min({epoch}) FROM tidegate_events WHERE id > :mark AND type = 'RunDequeued'", {"mark": mark}
    )
    last = _one(
        url,
        f"SELECT {epoch} FROM tidegate_events WHERE id > :mark AND type = 'RunCompleted' "
        " ORDER BY id LIMIT 1 OFFSET :skip",
        {"mark": mark, "skip": count - 1},
    )
    return last - first


def _one(url: str, query: str, parameters: dict[str, int]) -> float:
    """The one number `query` answers (named parameters as `:name`, written for both drivers)."""
    if url.startswith("sqlite"):
        with sqlite3.connect(sqlite_path(url)) as connection:
            return float(connection.execute(query, parameters).fetchone()[0])
    pg_query = query
    for name in parameters:
        pg_query = pg_query.replace(f":{name}", f"%({name})s")
    with psycopg.connect(url) as connection:
        row = connection.execute(pg_query, parameters).fetchone()
    assert row is not None
    return float(row[0])


def drain_rate(app: tidegate.App, url: str, queues: list[str], max_workers: int, count: int, limit: float) -> float:
    """Runs/s over the first `count` completions of one worker started now, stopped once they are done."""
    mark = last_event(url)
    worker = app.worker(queues=queues, max_workers=max_workers).start()
    deadline = time.monotonic() + limit
    try:
        while completed_since(url, mark) < count:
            if time.monotonic() > deadline:
                raise SystemExit(f"{count:,} completions not reached within {limit:.0f} s")
            time.sleep(0.25)
    finally:
        worker.stop()
    return count / window(url, mark, count)
