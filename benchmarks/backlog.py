"""Backlog: the drain rate with a deep queue against the same drain with a shallow one.

    python benchmarks/backlog.py [--deep 1000000] [--shallow 10000] [--count 5000] [--repeat 3]
    python benchmarks/backlog.py --quick      # a smoke test: 20,000 vs 1,000, 500 runs, once

For each backlog size, in a fresh database: `--templates` no-op runs are
submitted through tidegate and copied in the database up to the size
(benchmarks/backlog_fill.py), then one worker (`max_workers=64`) drains, and
the rate is taken over its first `--count` completions from the database's
event times. Sizes alternate within each repeat (shallow, deep, shallow,
deep, ...) so that a change in the machine's load falls on both; the figure
is the median deep/shallow ratio, per backend. Aim (issue 29): >= 0.8.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from rich.console import Console

import tidegate
from backlog_fill import copy_queued, drain_rate
from common import fresh_database, measured_with, median, write_markdown

HERE = Path(__file__).parent
MAX_WORKERS = 64
TIME_LIMIT = 1800.0  # a drain that has not reached --count by then fails instead of being waited on
QUICK_LIMIT = 60.0
console = Console()


def options() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--deep", type=int, default=1_000_000)
    parser.add_argument("--shallow", type=int, default=10_000)
    parser.add_argument("--count", type=int, default=5_000, help="completions timed in each drain")
    parser.add_argument("--templates", type=int, default=1_000, help="runs submitted through tidegate")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--quick", action="store_true", help="smoke test: 20,000 vs 1,000, 500 timed, once")
    parsed = parser.parse_args()
    if parsed.quick:
        parsed.deep, parsed.shallow, parsed.count, parsed.templates, parsed.repeat = 20_000, 1_000, 500, 100, 1
    if not 0 < parsed.count <= parsed.shallow <= parsed.deep or parsed.templates > parsed.shallow:
        parser.error("need 0 < --count <= --shallow <= --deep and --templates <= --shallow")
    return parsed


def make_app(url: str) -> tidegate.App:
    os.environ["TIDEGATE_DATABASE"] = url
    sys.path.insert(0, str(HERE))
    import bench_app

    app = tidegate.App(url)
    app.task(queue="bench", name=bench_app.noop.name)(bench_app.noop.fn)
    return app


def measure(backend: str, size: int, count: int, templates: int, limit: float) -> float:
    with fresh_database(backend) as url:
        app = make_app(url)
        noop = next(iter(app.tasks.values()))
        noop.submit_many([{}] * templates)
        copy_queued(url, "bench", size // templates - 1)
        noop.submit_many([{}] * (size % templates))
        try:
            return drain_rate(app, url, ["bench"], MAX_WORKERS, count, limit)
        finally:
            app.close()


def main() -> None:
    parsed = options()
    header = ["backend", f"runs/s, {parsed.shallow:,} queued", f"runs/s, {parsed.deep:,} queued", "deep / shallow"]
    limit = QUICK_LIMIT if parsed.quick else TIME_LIMIT
    rows = []
    for backend in parsed.backends.split(","):
        shallow, deep, ratios = [], [], []
        for attempt in range(parsed.repeat):
            shallow.append(measure(backend, parsed.shallow, parsed.count, parsed.templates, limit))
            deep.append(measure(backend, parsed.deep, parsed.count, parsed.templates, limit))
            ratios.append(deep[-1] / shallow[-1])
            console.print(f"[dim]{backend} {attempt + 1}: shallow {shallow[-1]:,.0f}/s, deep {deep[-1]:,.0f}/s[/]")
        rows.append([backend, f"{median(shallow):,.0f}", f"{median(deep):,.0f}", f"{median(ratios):.2f}"])
        console.print(" | ".join(rows[-1]))
    if parsed.quick:
        console.print("quick mode: nothing written")
        return
    path = write_markdown(
        "backlog",
        f"Backlog: drain rate with {parsed.deep:,} queued runs vs {parsed.shallow:,}, median of {parsed.repeat}",
        header,
        rows,
        [
            measured_with(f"python benchmarks/backlog.py --deep {parsed.deep} --shallow {parsed.shallow}"),
            f"One worker (`max_workers={MAX_WORKERS}`), no-op runs; each rate over the first {parsed.count:,} "
            "completions, from the database's event times. Sizes alternate within each repeat; the ratio is the "
            "median of the per-repeat ratios. Aim (issue 29): deep / shallow >= 0.8.",
        ],
    )
    console.print(f"written to {path}")


if __name__ == "__main__":
    main()
