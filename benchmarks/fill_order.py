"""Fill order (the leaky bucket): what it costs at saturation, and where a trickle goes.

    python benchmarks/fill_order.py [--runs 10000] [--repeat 3] [--backends sqlite,postgres]
        [--trickle-seconds 10] [--trickle-every 0.05]

Reports, per backend, the median over --repeat fresh databases of:
- saturation: drain runs/s of --runs no-op runs by two worker processes
  (max_workers=64 each), with fill order off and on, from the first claim to
  the last completion as the database recorded them, and the on/off ratio.
  Fill order is on by default only if this ratio shows it costs nothing.
- trickle: one no-op run submitted every --trickle-every seconds for
  --trickle-seconds to three worker processes (max_workers=4 each, started
  one after the other so their ranks are 0, 1, 2): the share of the runs
  each rank claimed, with fill order on, and off for contrast.
"""

from __future__ import annotations

import argparse
import time

from rich.console import Console
from rich.table import Table

from common import fresh_database, measured_with, median, parse_options, write_markdown
from limits_apps import build, event_times, query, start_worker, stop_worker, wait_ready
from tidegate import RunStatus

SATURATION_PROCESSES = 2
SATURATION_MAX_WORKERS = 64
TRICKLE_PROCESSES = 3
TRICKLE_MAX_WORKERS = 4
QUEUE = "cost"  # the `unlimited` scenario of limits_apps: a no-op task in a queue with no limit
console = Console()


def saturation_rate(backend: str, runs: int, fill_order: bool) -> float:
    """Runs/s draining a backlog of no-op runs, first claim to last completion."""
    with fresh_database(backend) as url:
        app = build("unlimited", url)
        noop = app.tasks["cost_noop"]
        for offset in range(0, runs, 1000):
            noop.submit_many([{}] * min(1000, runs - offset))
        app.close()
        workers = [
            start_worker(url, "unlimited", [QUEUE], SATURATION_MAX_WORKERS, drain=True, fill_order=fill_order)
            for _ in range(SATURATION_PROCESSES)
        ]
        try:
            for worker in workers:
                if worker.wait(timeout=600) != 0:
                    raise SystemExit(f"a worker process exited with {worker.returncode}")
        finally:
            for worker in workers:
                stop_worker(worker)
        events = event_times(url, QUEUE, ("RunDequeued", "RunCompleted"))
        completed = sum(1 for _, kind, _, _ in events if kind == "RunCompleted")
        if completed != runs:
            raise SystemExit(f"expected {runs} completed runs, found {completed}")
        first = min(at for _, kind, at, _ in events if kind == "RunDequeued")
        last = max(at for _, kind, at, _ in events if kind == "RunCompleted")
        return runs / (last - first)


def trickle_shares(backend: str, seconds: float, every: float, fill_order: bool) -> list[float]:
    """The share of a trickle's runs claimed by the worker of each rank (0, 1, 2)."""
    with fresh_database(backend) as url:
        app = build("unlimited", url)
        noop = app.tasks["cost_noop"]
        noop.submit_many([])  # migrated and registered before the workers start
        workers = []
        try:
            for _ in range(TRICKLE_PROCESSES):  # one after the other: ranks follow start order
                worker = start_worker(url, "unlimited", [QUEUE], TRICKLE_MAX_WORKERS, fill_order=fill_order)
                workers.append(worker)
                wait_ready(worker)
            ranks = dict(query(url, "SELECT id, rank FROM tidegate_workers", "SELECT id, rank FROM tidegate_workers"))
            total = round(seconds / every)
            started = time.monotonic()
            for index in range(total):
                time.sleep(max(0.0, started + index * every - time.monotonic()))
                noop.submit()
            give_up = time.monotonic() + 60
            while app.store.status_counts(QUEUE)[RunStatus.COMPLETED] < total:
                if time.monotonic() > give_up:
                    raise SystemExit("the trickle did not complete within 60s")
                time.sleep(0.05)
        finally:
            for worker in workers:
                stop_worker(worker)
            app.close()
        claims = [0] * TRICKLE_PROCESSES
        for _, _, _, worker_id in event_times(url, QUEUE, ("RunDequeued",)):
            claims[ranks[worker_id]] += 1
        return [count / total for count in claims]


def _trickle_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--trickle-seconds", type=float, default=10.0)
    parser.add_argument("--trickle-every", type=float, default=0.05)


def main() -> None:
    options = parse_options(__doc__, runs=10_000, extra=_trickle_options)
    saturation: dict[str, dict[bool, list[float]]] = {}
    shares: dict[str, dict[bool, list[float]]] = {}
    for backend in options.backends.split(","):
        rates: dict[bool, list[float]] = {False: [], True: []}
        split: dict[bool, list[list[float]]] = {False: [], True: []}
        for attempt in range(options.repeat):
            console.print(f"[dim]{backend}: run {attempt + 1} of {options.repeat}[/]")
            for fill_order in (False, True):  # interleaved, so drift in the machine's load hits both alike
                rates[fill_order].append(saturation_rate(backend, options.runs, fill_order))
                split[fill_order].append(
                    trickle_shares(backend, options.trickle_seconds, options.trickle_every, fill_order)
                )
        saturation[backend] = rates
        shares[backend] = {
            mode: [median([sample[rank] for sample in samples]) for rank in range(TRICKLE_PROCESSES)]
            for mode, samples in split.items()
        }

    header = ["backend", "drain/s, fill order off", "drain/s, fill order on", "on / off", "samples off", "samples on"]
    rows = [
        [
            backend,
            f"{median(samples[False]):,.0f}",
            f"{median(samples[True]):,.0f}",
            f"{median(samples[True]) / median(samples[False]):.2f}",
            ", ".join(f"{rate:,.0f}" for rate in samples[False]),
            ", ".join(f"{rate:,.0f}" for rate in samples[True]),
        ]
        for backend, samples in saturation.items()
    ]
    trickle_header = ["backend", "fill order", "rank 0", "rank 1", "rank 2"]
    trickle_rows = [
        [backend, "on" if mode else "off", *(f"{share:.0%}" for share in split)]
        for backend, by_mode in shares.items()
        for mode, split in sorted(by_mode.items(), reverse=True)
    ]
    for title, columns, body in (
        (f"Saturation: {options.runs:,} no-op runs, median of {options.repeat}", header, rows),
        (f"Trickle: share of runs claimed per rank, median of {options.repeat}", trickle_header, trickle_rows),
    ):
        table = Table(title=title)
        for column in columns:
            table.add_column(column, justify="left" if column in ("backend", "fill order") else "right")
        for row in body:
            table.add_row(*row)
        console.print(table)
    trickle_runs = round(options.trickle_seconds / options.trickle_every)
    path = write_markdown(
        "fill_order",
        f"Fill order: saturation throughput and trickle shares, median of {options.repeat}",
        header,
        rows,
        [
            f"Saturation: {options.runs:,} no-op runs drained by {SATURATION_PROCESSES} worker processes "
            f"(`max_workers={SATURATION_MAX_WORKERS}`), from the first claim to the last completion as recorded "
            "in the database; fill order off and on measured alternately on fresh databases (each sample in "
            "measurement order). The ratio is of the medians.",
            "",
            "| " + " | ".join(trickle_header) + " |",
            "|" + "|".join("---" for _ in trickle_header) + "|",
            *("| " + " | ".join(row) + " |" for row in trickle_rows),
            "",
            f"Trickle: one no-op run every {options.trickle_every * 1000:g} ms for {options.trickle_seconds:g} s "
            f"({trickle_runs} runs) to {TRICKLE_PROCESSES} worker processes (`max_workers={TRICKLE_MAX_WORKERS}`) "
            "started in rank order; the share of `RunDequeued` events per rank (median of each rank's share).",
            "",
            measured_with("python benchmarks/fill_order.py"),
        ],
    )
    console.print(f"written to {path}")


if __name__ == "__main__":
    main()
