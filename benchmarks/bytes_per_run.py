"""Bytes stored per finished run: runs, events and every index, before retention.

    python benchmarks/bytes_per_run.py [--runs 20000] [--rounds 1] [--backends sqlite,postgres]

Submits --runs no-op runs (`submit_many`, 1,000 a call), drains them with one
in-process worker (`max_workers=64`), then reads every tidegate table's and
index's size and subtracts the same schema's sizes when empty.

With --rounds N the runs arrive in N rounds, each submitted, drained and then
vacuumed (plain VACUUM on PostgreSQL, the part autovacuum plays in a live
database; a WAL checkpoint on SQLite) before the next: the backlog peaks at
runs/N, so the space a run's dead row versions and its queued-only index
entries took is reused by the next round's runs. One round (the default) is
the whole backlog queued at once: the queued-only indexes and the dead versions
of every run's updates stay as pages, so "stored" there is the footprint of a
backlog of --runs, and --rounds 20 is closer to what a finished run leaves in a
database that drains as fast as it is fed. Sizes:

- "stored": after a plain VACUUM (ANALYZE) on PostgreSQL (dead row versions
  left by the run's updates still occupy their pages, as they do in a live
  database until new rows reuse them), after a WAL checkpoint on SQLite (its
  free space inside pages counts, its free-list pages do not);
- "compacted": after VACUUM FULL on PostgreSQL, VACUUM on SQLite: only the live
  rows and freshly built indexes, the floor a schema change must lower.

Sizes do not depend on the machine's load, so one run is enough (no medians).
Also printed: the event rows each run leaves, by type.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

import tidegate
from common import fresh_database, measured_with, parse_options, write_markdown
from storage_sizes import Relation, event_counts, grown, read_sizes

HERE = Path(__file__).parent
BATCH = 1000
MAX_WORKERS = 64
console = Console()


def make_app(url: str) -> tidegate.App:
    os.environ["TIDEGATE_DATABASE"] = url
    sys.path.insert(0, str(HERE))
    import bench_app

    app = tidegate.App(url)
    app.task(queue="bench", name=bench_app.noop.name)(bench_app.noop.fn)
    return app


def measure(backend: str, runs: int, rounds: int) -> tuple[dict[str, Relation], dict[str, Relation], dict[str, int]]:
    """(stored growth, compacted growth, event rows by type) for `runs` finished no-op runs, in `rounds`."""
    with fresh_database(backend) as url:
        app = make_app(url)
        app.store.check_schema()
        empty = read_sizes(url, compact=True)
        noop = next(iter(app.tasks.values()))
        for round_number in range(rounds):
            start, end = runs * round_number // rounds, runs * (round_number + 1) // rounds
            for offset in range(start, end, BATCH):
                noop.submit_many([{}] * min(BATCH, end - offset))
            app.worker(queues=["bench"], max_workers=MAX_WORKERS, drain=True).run()
            if round_number < rounds - 1:
                read_sizes(url, compact=False)  # the vacuum between rounds (its sizes are not needed)
        counts = app.store.status_counts("bench")
        app.close()
        if counts.get(tidegate.RunStatus.COMPLETED) != runs:
            raise SystemExit(f"{backend}: expected {runs} completed runs, found {counts}")
        stored = grown(empty, read_sizes(url, compact=False))
        compacted = grown(empty, read_sizes(url, compact=True))
        return stored, compacted, event_counts(url)


def per_run(size: int, runs: int) -> str:
    return f"{size / runs:,.0f}"


def rows_for(backend: str, stored: dict[str, Relation], compacted: dict[str, Relation], runs: int) -> list[list[str]]:
    """One row per table (rows only), its indexes under it, then the totals per table and overall."""
    rows: list[list[str]] = []
    tables = sorted({rel.table for rel in stored.values()}, key=lambda table: -sum_of(stored, table))
    small = [table for table in tables if sum_of(compacted, table) < runs]
    for table in tables:
        if table in small:  # no per-run rows (under a byte a run compacted): fixed pages
            continue
        members = sorted(
            (rel for rel in stored.values() if rel.table == table), key=lambda rel: (rel.is_index, -rel.size)
        )
        for rel in members:
            label = f"  index {rel.name}" if rel.is_index else f"table {rel.name} (rows)"
            rows.append([backend, label, per_run(rel.size, runs), per_run(compacted[rel.name].size, runs)])
        indexes = [rel for rel in members if rel.is_index]
        rows.append(
            [
                backend,
                f"**{table}: rows + {len(indexes)} indexes**",
                f"**{per_run(sum_of(stored, table), runs)}**",
                f"**{per_run(sum_of(compacted, table), runs)}**",
            ]
        )
    if small:
        rows.append(
            [
                backend,
                f"other tables: fixed pages, no rows per run ({len(small)})",
                per_run(sum(sum_of(stored, table) for table in small), runs),
                per_run(sum(sum_of(compacted, table) for table in small), runs),
            ]
        )
    total_stored = sum(rel.size for rel in stored.values())
    total_compacted = sum(rel.size for rel in compacted.values())
    rows.append([backend, "**total**", f"**{per_run(total_stored, runs)}**", f"**{per_run(total_compacted, runs)}**"])
    return rows


def sum_of(relations: dict[str, Relation], table: str) -> int:
    return sum(rel.size for rel in relations.values() if rel.table == table)


def main() -> None:
    options = parse_options(
        __doc__, runs=20_000, extra=lambda parser: parser.add_argument("--rounds", type=int, default=1)
    )
    if not 1 <= options.rounds <= options.runs:
        raise SystemExit(f"--rounds must be between 1 and --runs ({options.runs}), got {options.rounds}")
    rounds = f" in {options.rounds} rounds" if options.rounds > 1 else ""
    header = ["backend", "relation", "bytes/run, stored", "bytes/run, compacted"]
    rows: list[list[str]] = []
    notes = [
        measured_with(f"python benchmarks/bytes_per_run.py --runs {options.runs} --rounds {options.rounds}"),
        f"{options.runs:,} no-op runs submitted 1,000 a call and drained by one worker (`max_workers={MAX_WORKERS}`)"
        + (
            f", in {options.rounds} rounds of {options.runs // options.rounds:,} each drained and vacuumed before "
            "the next (a live database's autovacuum)"
            if options.rounds > 1
            else ", all queued before the drain (a backlog of them all)"
        )
        + "; growth over the same schema empty. Stored: after VACUUM (ANALYZE) (PostgreSQL) or a WAL checkpoint "
        "(SQLite, dbstat pages). Compacted: after VACUUM FULL (PostgreSQL) or VACUUM (SQLite).",
        "",
    ]
    for backend in options.backends.split(","):
        console.print(f"[dim]{backend}: {options.runs:,} runs[/]")
        stored, compacted, events = measure(backend, options.runs, options.rounds)
        rows.extend(rows_for(backend, stored, compacted, options.runs))
        total = sum(events.values())
        by_type = ", ".join(f"{kind} {count / options.runs:.2f}" for kind, count in events.items())
        notes.append(f"{backend}: {total / options.runs:.2f} event rows per run ({by_type}).")
    table = Table(title=f"Bytes per finished run, {options.runs:,} no-op runs{rounds}")
    for column in header:
        table.add_column(column, justify="left" if column in ("backend", "relation") else "right")
    for row in rows:
        table.add_row(*(cell.replace("**", "") for cell in row))
    console.print(table)
    for note in notes[3:]:
        console.print(note)
    name = "bytes_per_run" if options.rounds == 1 else "bytes_per_run_rounds"
    path = write_markdown(
        name, f"Bytes stored per finished run ({options.runs:,} no-op runs{rounds})", header, rows, notes
    )
    console.print(f"written to {path}")


if __name__ == "__main__":
    main()
