"""What tidegate's tables and indexes occupy, read the same way on both backends.

Sizes are bytes per relation (a table's heap with its TOAST and maps, or one
index), so a benchmark can subtract an empty schema's sizes from a filled one
and divide by the runs it stored. Reading them is load-independent: the same
runs give the same bytes on a busy machine as on a quiet one.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

import psycopg
from psycopg import sql

PG_SIZES = """
SELECT c.relname, c.relkind = 'i', coalesce(t.relname, c.relname),
       CASE WHEN c.relkind = 'i' THEN pg_relation_size(c.oid) ELSE pg_table_size(c.oid) END
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_index i ON i.indexrelid = c.oid
LEFT JOIN pg_class t ON t.oid = i.indrelid
WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'i') AND c.relname LIKE 'tidegate%'
"""

PG_TABLES = """
SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = current_schema() AND c.relkind = 'r' AND c.relname LIKE 'tidegate%'
ORDER BY c.relname
"""


@dataclass(frozen=True)
class Relation:
    """One table (its own rows, without indexes) or one index, and the table it belongs to."""

    name: str
    is_index: bool
    table: str
    size: int


def sqlite_path(url: str) -> str:
    return url[len("sqlite:///") :]


def read_sizes(url: str, compact: bool) -> dict[str, Relation]:
    """Every tidegate relation's bytes, after VACUUM (compact: VACUUM FULL on PostgreSQL) and ANALYZE."""
    if url.startswith("sqlite"):
        return _sqlite_sizes(sqlite_path(url), compact)
    with psycopg.connect(url, autocommit=True) as connection:
        # Only this schema's tables: a VACUUM of the whole database would also take the locks of
        # every other schema on the server (other benchmarks and tests), and deadlock with their DDL.
        tables = [row[0] for row in connection.execute(PG_TABLES).fetchall()]
        command = "VACUUM (FULL, ANALYZE) {}" if compact else "VACUUM (ANALYZE) {}"
        connection.execute(sql.SQL(command).format(sql.SQL(", ").join(map(sql.Identifier, tables))))
        rows = connection.execute(PG_SIZES).fetchall()
    return {name: Relation(name, is_index, table, size) for name, is_index, table, size in rows}


def _sqlite_sizes(path: str, compact: bool) -> dict[str, Relation]:
    """From dbstat: pages per table and index (SQLite keeps no TOAST; overflow pages count with their table)."""
    with sqlite3.connect(path) as connection:
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        if compact:
            connection.execute("VACUUM")
        connection.execute("ANALYZE")
        tables = dict(connection.execute("SELECT name, tbl_name FROM sqlite_master WHERE type IN ('table', 'index')"))
        kinds = dict(connection.execute("SELECT name, type FROM sqlite_master WHERE type IN ('table', 'index')"))
        rows = connection.execute("SELECT name, sum(pgsize) FROM dbstat GROUP BY name").fetchall()
    found = {}
    for name, size in rows:
        if not name.startswith(("tidegate", "sqlite_autoindex_tidegate")):
            continue
        table = tables.get(name, name)
        found[name] = Relation(name, kinds.get(name) == "index" or name.startswith("sqlite_autoindex"), table, size)
    return found


def grown(before: dict[str, Relation], after: dict[str, Relation]) -> dict[str, Relation]:
    """Each relation's growth from `before` (an empty schema) to `after`."""
    return {
        name: Relation(name, rel.is_index, rel.table, rel.size - (before[name].size if name in before else 0))
        for name, rel in after.items()
    }


def event_counts(url: str) -> dict[str, int]:
    """Event rows by type."""
    query = "SELECT type, count(*) FROM tidegate_events GROUP BY type ORDER BY type"
    if url.startswith("sqlite"):
        with sqlite3.connect(sqlite_path(url)) as connection:
            return dict(connection.execute(query).fetchall())
    with psycopg.connect(url) as connection:
        return dict(connection.execute(query).fetchall())
