"""What a limited claim's holder rows cost PostgreSQL, per run, for each way of storing them.

    python benchmarks/holder_rows.py [--reps 80] [--claim 172] [--scopes 3]

The cost_of_limits drain claims ~172 runs a cycle under three scopes (global, a queue partition,
a tag value), and each claimed run writes one holder row per scope, deleted when the run ends
(issue 29). This isolates those two statements from the rest of the claim: in a fresh schema per
layout, a claim's holders are inserted in one transaction (`claim_runs`'s shape: a JSON array of
[scope, run] pairs) and deleted by run in another (`cycle_reports`'s shape), --reps times, the
layouts interleaved within each rep so load moves them alike. Reported: the median per run of
each, client-side (statement, round trip and COMMIT together).

Layouts:
- `now`: the primary key (scope, holder) and three indexes (run, holder, expiry), ON CONFLICT
  taking over a holder left behind (the schema today);
- `partial`: holder and expiry indexes partial (`WHERE holder <> run_id`: step holders only; the
  migration 0031 tried and reverted on branch `pgcount`, docs/postgres-profile.md);
- `partial, plain insert`: the same without ON CONFLICT (not exact as it stands: a holder left
  behind would fail the claim; shown for what the speculative insertion costs);
- `one row per run`: one row per claimed run (scope ''), a stand-in for a row carrying all of a
  run's scopes: what fewer rows would save, before any reader is rewritten.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from rich.console import Console

from common import PG_SERVER, print_table

Connection = psycopg.Connection[tuple[object, ...]]

TABLE = """CREATE TABLE tidegate_holders (
    scope text COLLATE "C" NOT NULL, holder text COLLATE "C" NOT NULL, run_id text COLLATE "C" NOT NULL,
    attempt integer NOT NULL, worker_id text, slots integer NOT NULL DEFAULT 1 CHECK (slots >= 1),
    claimed_at timestamptz NOT NULL, expires_at timestamptz NOT NULL, PRIMARY KEY (scope, holder));
CREATE INDEX tidegate_holders_run ON tidegate_holders (run_id)"""
FULL = (
    "CREATE INDEX tidegate_holders_holder ON tidegate_holders (holder);"
    "CREATE INDEX tidegate_holders_expiry ON tidegate_holders (expires_at)"
)
PARTIAL = (
    "CREATE INDEX tidegate_holders_holder ON tidegate_holders (holder) WHERE holder <> run_id;"
    "CREATE INDEX tidegate_holders_expiry ON tidegate_holders (expires_at) WHERE holder <> run_id"
)
PLAIN = """INSERT INTO tidegate_holders AS t (scope, holder, run_id, attempt, worker_id, slots, claimed_at, expires_at)
SELECT h.pair ->> 0, h.pair ->> 1, h.pair ->> 1, 1, 'w', 1, now(), now() + interval '60 s'
FROM jsonb_array_elements(%(pairs)s::jsonb) AS h(pair)"""
UPSERT = (
    PLAIN
    + """
ON CONFLICT (scope, holder) DO UPDATE SET run_id = excluded.run_id, attempt = excluded.attempt,
    worker_id = excluded.worker_id, slots = excluded.slots, claimed_at = excluded.claimed_at,
    expires_at = excluded.expires_at"""
)
ONE_ROW = """INSERT INTO tidegate_holders (scope, holder, run_id, attempt, worker_id, slots, claimed_at, expires_at)
SELECT '', r, r, 1, 'w', 1, now(), now() + interval '60 s' FROM unnest(%(ids)s::text[]) AS r"""
DELETE = "DELETE FROM tidegate_holders WHERE run_id = ANY(%(ids)s::text[]) RETURNING run_id, claimed_at"
LAYOUTS = {
    "now (4 indexes, ON CONFLICT)": (FULL, UPSERT),
    "partial": (PARTIAL, UPSERT),
    "partial, plain insert": (PARTIAL, PLAIN),
    "one row per run": (PARTIAL, ONE_ROW),
}


@contextmanager
def schema(indexes: str) -> Iterator[Connection]:
    name = f"holders_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(PG_SERVER, autocommit=True) as connection:
        connection.execute(f'CREATE SCHEMA "{name}"')
        connection.execute(f'SET search_path = "{name}"')
        try:
            for statement in f"{TABLE};{indexes}".split(";"):
                connection.execute(statement)
            yield connection
        finally:
            connection.execute(f'DROP SCHEMA "{name}" CASCADE')


def one_claim(connection: Connection, insert: str, claim: int, scopes: int) -> tuple[float, float]:
    """Seconds to write one claim's holders, then to delete them by run (each its own transaction)."""
    ids = [uuid.uuid4().hex for _ in range(claim)]
    pairs = json.dumps([[f"scope{index}", run] for run in ids for index in range(scopes)])
    started = time.perf_counter()
    with connection.transaction():
        connection.execute(insert, {"pairs": pairs, "ids": ids})
    written = time.perf_counter()
    with connection.transaction():
        connection.execute(DELETE, {"ids": ids}).fetchall()
    return written - started, time.perf_counter() - written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=80)
    parser.add_argument("--claim", type=int, default=172)
    parser.add_argument("--scopes", type=int, default=3)
    options = parser.parse_args()
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in LAYOUTS}
    with (
        schema(FULL) as full,
        schema(PARTIAL) as partial,
        schema(PARTIAL) as plain,
        schema(PARTIAL) as one_row,
    ):
        connections = dict(zip(LAYOUTS, (full, partial, plain, one_row), strict=True))
        for _ in range(options.reps):
            for name, (_, insert) in LAYOUTS.items():
                samples[name].append(one_claim(connections[name], insert, options.claim, options.scopes))
    per_run = 1e6 / options.claim
    rows = [
        [
            name,
            f"{statistics.median(s[0] for s in taken) * per_run:.1f}",
            f"{statistics.median(s[1] for s in taken) * per_run:.1f}",
        ]
        for name, taken in samples.items()
    ]
    title = f"holder rows, a claim of {options.claim} runs x {options.scopes} scopes (medians of {options.reps})"
    print_table(Console(), title, ["layout", "insert µs/run", "delete µs/run"], rows, left=("layout",))


if __name__ == "__main__":
    main()
