"""Shared benchmark plumbing: fresh databases, medians, the results table.

Every figure is the median of several runs, and each benchmark also measures
a baseline in the same run so that results are reported as ratios too.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
from rich.console import Console
from rich.table import Table

PG_SERVER = os.environ.get("TIDEGATE_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/test")
RESULTS = Path(__file__).parent / "results"


@contextlib.contextmanager
def fresh_database(backend: str) -> Iterator[str]:
    """A database URL nobody has used: a temp SQLite file or a new PostgreSQL schema."""
    if backend == "sqlite":
        with tempfile.TemporaryDirectory(prefix="tidegate-bench-") as folder:
            yield f"sqlite:///{folder}/bench.db"
        return
    schema = f"bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(PG_SERVER, autocommit=True) as connection:
        connection.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield f"{PG_SERVER}?options=-csearch_path%3D{schema}"
    finally:
        with psycopg.connect(PG_SERVER, autocommit=True) as connection:
            connection.execute(f'DROP SCHEMA "{schema}" CASCADE')


def median(values: list[float]) -> float:
    return statistics.median(values)


def parse_options(
    doc: str | None, runs: int | None, extra: Callable[[argparse.ArgumentParser], object] | None = None
) -> argparse.Namespace:
    """The options every benchmark takes (--repeat, --backends, and --runs when it drains a count)."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    if runs is not None:
        parser.add_argument("--runs", type=int, default=runs)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--backends", default="sqlite,postgres")
    if extra is not None:
        extra(parser)
    return parser.parse_args()


def repeated(
    backends: str, repeat: int, measure: Callable[[str], dict[str, float]], console: Console
) -> dict[str, list[dict[str, float]]]:
    """Each backend measured `repeat` times (each in its own fresh database, as `measure` sees fit)."""
    samples: dict[str, list[dict[str, float]]] = {}
    for backend in backends.split(","):
        samples[backend] = []
        for attempt in range(repeat):
            console.print(f"[dim]{backend}: run {attempt + 1} of {repeat}[/]")
            samples[backend].append(measure(backend))
            console.print(f"[dim]  {samples[backend][-1]}[/]")
    return samples


def medians(samples: list[dict[str, float]]) -> dict[str, float]:
    """The median of every figure over the repeats."""
    return {key: median([sample[key] for sample in samples]) for key in samples[0]}


def max_overlap(intervals: list[tuple[float, float]]) -> int:
    """Most intervals open at once; [start, end) so a hand-off at the same instant is not an overlap."""
    points = sorted([(end, -1) for _, end in intervals] + [(start, 1) for start, _ in intervals])
    best = current = 0
    for _, delta in points:
        current += delta
        best = max(best, current)
    return best


def measured_with(command: str) -> str:
    """The first note of every results file: when, on how many cores, and the command to measure again."""
    return f"Measured {time.strftime('%Y-%m-%d')} on {os.cpu_count()} cores with `{command}`."


def print_table(
    console: Console, title: str, header: list[str], rows: list[list[str]], left: tuple[str, ...] = ("backend",)
) -> None:
    """The results as a table on the console: the columns named in `left` to the left, figures to the right."""
    table = Table(title=title)
    for column in header:
        table.add_column(column, justify="left" if column in left else "right")
    for row in rows:
        table.add_row(*row)
    console.print(table)


def write_markdown(name: str, title: str, header: list[str], rows: list[list[str]], notes: list[str]) -> Path:
    RESULTS.mkdir(exist_ok=True)
    lines = [f"# {title}", ""]
    lines.append("| " + " | ".join(header) + " |")
    lines.append("|" + "|".join("---" for _ in header) + "|")
    lines.extend("| " + " | ".join(row) + " |" for row in rows)
    lines.append("")
    lines.extend(notes)
    path = RESULTS / f"{name}.md"
    path.write_text("\n".join(lines) + "\n")
    return path
