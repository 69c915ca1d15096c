"""Tenants: claim cost per run with many partitions of a limited queue against one partition.

    python benchmarks/tenants.py [--partitions 10000] [--per-partition 10] [--count 10000] [--repeat 3]
    python benchmarks/tenants.py --quick      # a smoke test: 100 partitions of 5, 200 runs, once

The queue is limited per partition (`Partition(by_args=["tenant"])`). Both
sides hold the same number of queued runs (partitions x per-partition) and
let the same number run at once, so only the partitions differ:

- many: `--partitions` tenants with `--per-partition` queued runs each, a
  limit of 1 per tenant;
- one: every run for one tenant, a limit of `max_workers` (64).

One worker drains each, timed over its first `--count` completions from the
database's event times (backlog_fill.py fills the queue: the runs are copied
in the database, round-robin across tenants as interleaved arrivals would
be). The figure is the cost per run, many / one (the inverse ratio of the
rates), median of the per-repeat ratios. Aim (issue 29): <= 1.5.
"""

from __future__ import annotations

import argparse
import os

from rich.console import Console

import tidegate
from backlog_fill import copy_queued, drain_rate
from common import fresh_database, measured_with, median, write_markdown

MAX_WORKERS = 64
TIME_LIMIT = 1800.0  # a drain that has not reached --count by then fails instead of being waited on
QUICK_LIMIT = 60.0
TEMPLATES_ONE = 1_000
console = Console()


def tenant_job(tenant: int) -> None:
    """A no-op run of one tenant."""


def options() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", type=int, default=10_000)
    parser.add_argument("--per-partition", type=int, default=10)
    parser.add_argument("--count", type=int, default=10_000, help="completions timed in each drain")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--quick", action="store_true", help="smoke test: 100 partitions of 5, 200 timed, once")
    parsed = parser.parse_args()
    if parsed.quick:
        parsed.partitions, parsed.per_partition, parsed.count, parsed.repeat = 100, 5, 200, 1
    if (
        parsed.partitions < 1
        or parsed.per_partition < 1
        or not 0 < parsed.count <= parsed.partitions * parsed.per_partition
    ):
        parser.error("need --partitions >= 1, --per-partition >= 1 and 0 < --count <= partitions x per-partition")
    return parsed


def make_app(url: str, limit: int) -> tidegate.App:
    os.environ["TIDEGATE_DATABASE"] = url
    app = tidegate.App(url)
    app.queue(
        "tenants",
        concurrency=tidegate.Concurrency(global_limit=limit, partition=tidegate.Partition(by_args=["tenant"])),
    )
    app.task(queue="tenants", name="tenant_job")(tenant_job)
    return app


def measure(backend: str, partitions: int, per_partition: int, count: int, limit: float) -> float:
    """Runs/s: `partitions` tenants (limit 1 each) or, with partitions=1, one tenant limited to max_workers."""
    total = partitions * per_partition
    with fresh_database(backend) as url:
        app = make_app(url, 1 if partitions > 1 else MAX_WORKERS)
        task = app.tasks["tenant_job"]
        if partitions > 1:
            task.submit_many([{"tenant": tenant} for tenant in range(partitions)])
            copy_queued(url, "tenants", per_partition - 1)
        else:
            templates = min(TEMPLATES_ONE, total)
            task.submit_many([{"tenant": 0}] * templates)
            copy_queued(url, "tenants", total // templates - 1)
            task.submit_many([{"tenant": 0}] * (total % templates))
        try:
            return drain_rate(app, url, ["tenants"], MAX_WORKERS, count, limit)
        finally:
            app.close()


def main() -> None:
    parsed = options()
    header = ["backend", "runs/s, 1 partition", f"runs/s, {parsed.partitions:,} partitions", "cost per run, many / one"]
    limit = QUICK_LIMIT if parsed.quick else TIME_LIMIT
    rows = []
    for backend in parsed.backends.split(","):
        one, many, ratios = [], [], []
        for attempt in range(parsed.repeat):
            one.append(measure(backend, 1, parsed.partitions * parsed.per_partition, parsed.count, limit))
            many.append(measure(backend, parsed.partitions, parsed.per_partition, parsed.count, limit))
            ratios.append(one[-1] / many[-1])
            console.print(f"[dim]{backend} {attempt + 1}: one {one[-1]:,.0f}/s, many {many[-1]:,.0f}/s[/]")
        rows.append([backend, f"{median(one):,.0f}", f"{median(many):,.0f}", f"{median(ratios):.2f}x"])
        console.print(" | ".join(rows[-1]))
    if parsed.quick:
        console.print("quick mode: nothing written")
        return
    path = write_markdown(
        "tenants",
        f"Tenants: {parsed.partitions:,} partitions of a limited queue vs 1, median of {parsed.repeat}",
        header,
        rows,
        [
            measured_with(
                f"python benchmarks/tenants.py --partitions {parsed.partitions} --per-partition {parsed.per_partition}"
            ),
            f"{parsed.partitions * parsed.per_partition:,} queued no-op runs on each side; many: limit 1 per tenant; "
            f"one: one tenant limited to {MAX_WORKERS}; one worker (`max_workers={MAX_WORKERS}`), each rate over "
            f"its first {parsed.count:,} completions. Aim (issue 29): cost per run many / one <= 1.5.",
        ],
    )
    console.print(f"written to {path}")


if __name__ == "__main__":
    main()
