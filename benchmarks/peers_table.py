"""The side-by-side table of benchmarks/results/peers.md, from one sitting of peers_sitting.sh.

    python benchmarks/peers_table.py [DIR]   (default: benchmarks/results/peers)

Medians over the reps of each system, each figure also as a ratio to the best
peer measured in the same sitting (above 1: tidegate ahead), and tidegate
after / before. Prints the Markdown rows and every rep's value, so that a
reader can see the spread behind each median.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

Row = dict[str, Any]
SYSTEMS = ("pgqueuer", "procrastinate", "tidegate-base", "tidegate-new", "tidegate-base-sqlite", "tidegate-new-sqlite")


def _w1_limited(row: Row) -> bool:
    return bool(row["workload"] == "W1" and row.get("limit") not in (None, 0))


def _w1_free(row: Row) -> bool:
    return bool(row["workload"] == "W1-limit0" or (row["workload"] == "W1" and row.get("limit") in (None, 0)))


def _w2(row: Row) -> bool:
    return bool(row["workload"] == "W2")


def _w3(procs: int) -> Callable[[Row], bool]:
    return lambda row: bool(row["workload"] == "W3" and row.get("procs", 1) == procs)


# label, field, which rows, higher is better
FIGURES: list[tuple[str, str, Callable[[Row], bool], bool]] = [
    ("W1 drain, 5,000 no-op runs, limit 4, 1 worker (runs/s)", "drain_jobs_per_s", _w1_limited, True),
    ("W1 drain, no limit, 1 worker, 8 slots (runs/s)", "drain_jobs_per_s", _w1_free, True),
    ("enqueue, one call per run (runs/s, in the W1 no-limit runs)", "enqueue_single_per_s", _w1_free, True),
    ("W2 400 x 50 ms, limit 4: ideal/actual", "ideal_over_actual", _w2, True),
    ("W3 hand-off at limit 1, one process: p50 (ms)", "gap_p50_ms", _w3(1), False),
    ("W3 hand-off at limit 1, one process: p99 (ms)", "gap_p99_ms", _w3(1), False),
    ("W3 hand-off at limit 1, two processes: p50 (ms)", "gap_p50_ms", _w3(2), False),
    ("W3 hand-off at limit 1, two processes: p99 (ms)", "gap_p99_ms", _w3(2), False),
]


def load(folder: Path, system: str) -> list[Row]:
    path = folder / f"{system}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def values(rows: list[Row], field: str, which: Callable[[Row], bool]) -> list[float]:
    return [float(row[field]) for row in rows if which(row) and row.get(field) is not None]


def median(found: list[float]) -> float | None:
    return statistics.median(found) if found else None


def shown(value: float | None) -> str:
    if value is None:
        return "-"
    if value >= 100:
        return f"{value:,.0f}"
    return f"{value:.3f}" if value < 2 else f"{value:.1f}"


def ratio(value: float | None, best: float | None, higher: bool) -> str:
    if value is None or best is None:
        return "-"
    return f"{value / best if higher else best / value:.2f}"


def main() -> None:
    folder = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent / "results" / "peers"
    rows = {system: load(folder, system) for system in SYSTEMS}
    for label, field, which, higher in FIGURES:
        pgq, pro, before, after = (median(values(rows[s], field, which)) for s in SYSTEMS[:4])
        peers = [value for value in (pgq, pro) if value is not None]
        best = (max(peers) if higher else min(peers)) if peers else None
        change = ratio(after, before, higher) if before is not None else "-"
        print(
            f"| {label} | {shown(pgq)} | {shown(pro)} | {shown(before)} ({ratio(before, best, higher)}) "
            f"| {shown(after)} ({ratio(after, best, higher)}) | {change} |"
        )
    print()
    for label, field, which, higher in FIGURES[1:3]:
        before, after = (median(values(rows[s], field, which)) for s in SYSTEMS[4:])
        change = ratio(after, before, higher)
        print(f"SQLite {label}: before {shown(before)}, after {shown(after)}, after/before {change}")
    print()
    for system in SYSTEMS:
        for label, field, which, _ in FIGURES:
            found = values(rows[system], field, which)
            if found:
                print(f"{system}: {label}: {found}")


if __name__ == "__main__":
    main()
