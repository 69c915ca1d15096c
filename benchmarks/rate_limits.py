"""Rates: a drain paced by a rate, a rate that never binds, and many rate partitions.

    python benchmarks/rate_limits.py [--runs 3000] [--loose-runs 10000] [--partition-runs 50000]
        [--repeat 3] [--backends sqlite,postgres] [--loose-only]

Each scenario in a fresh database, drained by one worker process (max_workers=64):
- paced: --runs no-op runs through one budget of 200 starts per second. Reported:
  achieved / allowed (charges from the first to the last, at the instants the claims
  charged the rate on the database's clock; aim >= 0.95, never above 1.0), the most
  charged in any one second (at most 200; beside it the most RunDequeued events in a
  second, which carry the claim statement's time, a round trip after the charge), and
  the worker's CPU while it paces, in % of one core;
- waiting: one start a minute and 100 runs queued behind it: the worker's CPU over
  5 s while it waits for the next token (aim < 5 % of a core: it sleeps until the
  store's next allowed time instead of polling);
- loose: --loose-runs runs with no rate (the baseline) and with a rate that never
  binds (10^6 per second): drain rate ratio (aim >= 0.9); --loose-only measures just
  this, prints it and writes nothing (to set one tree against another, interleaved);
- partitions: --partition-runs runs over 1,000 rate partitions of 50/s each, against
  one budget of 50,000/s (neither binds): wall time per run, ratio (aim <= 1.5).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from rich.console import Console

from common import fresh_database, measured_with, median, medians, parse_options, print_table, repeated, write_markdown
from limits_apps import (
    build,
    charge_instants,
    cpu_seconds,
    event_times,
    idle_cpu_percent,
    start_worker,
    stop_worker,
    wait_ready,
)
from rate_apps import PACED_RATE, PARTITIONS
from tidegate.domain.rates import NS

MAX_WORKERS = 64
CHUNK = 1000
WAITING_RUNS = 100
WAITING_SECONDS = 5.0
console = Console()


def submit(url: str, scenario: str, runs: int, partitions: int = 1) -> None:
    app = build(scenario, url)
    task = app.tasks["rated_noop"]
    for first in range(0, runs, CHUNK):
        task.submit_many([{"p": n % partitions} for n in range(first, min(runs, first + CHUNK))])
    app.close()


def drain(url: str, scenario: str, runs: int, partitions: int = 1) -> dict[str, float]:
    """Submit, then drain with one worker process; the claims' and completions' database times."""
    submit(url, scenario, runs, partitions)
    worker = start_worker(url, scenario, ["rated"], MAX_WORKERS, drain=True)
    try:
        wait_ready(worker)
        cpu_before = cpu_seconds(worker.pid)
        begun = time.monotonic()
        cpu_after = cpu_before
        while worker.poll() is None:  # the last reading before it exits: its CPU while draining
            cpu_after = cpu_seconds(worker.pid)
            time.sleep(0.2)
        if worker.returncode != 0:
            raise SystemExit(f"the worker process exited with {worker.returncode}")
        elapsed = time.monotonic() - begun
    finally:
        stop_worker(worker)
    times = event_times(url, "rated", ("RunDequeued", "RunCompleted"))
    claims = sorted(at for _, kind, at, _ in times if kind == "RunDequeued")
    completions = [at for _, kind, at, _ in times if kind == "RunCompleted"]
    if len(completions) != runs:
        raise SystemExit(f"expected {runs} completed runs, found {len(completions)}")
    charged = charge_instants(url, "rated")
    figures = {
        "drain": runs / (max(completions) - claims[0]),
        "cpu": 100 * (cpu_after - cpu_before) / elapsed,
        "cpu_per_run": 1000 * (cpu_after - cpu_before) / runs,  # ms: steadier than % under a changing load
    }
    if charged:  # a rated scenario: the rate is judged at the instants it charged
        figures["claim_rate"] = (len(charged) - 1) * NS / (charged[-1] - charged[0])
        figures["most_in_a_second"] = most_in_a_window(charged, NS)
        figures["most_dequeued_in_a_second"] = most_in_a_window(claims, 1.0)
    return figures


def most_in_a_window(times: Sequence[float], window: float) -> float:
    """The most times in any half-open window [t, t + window) (`times` sorted)."""
    most, end = 0, 0
    for begin, at in enumerate(times):
        while end < len(times) and times[end] < at + window:
            end += 1
        most = max(most, end - begin)
    return float(most)


def waiting_cpu(url: str) -> float:
    """% of one core the worker uses while every queued run waits for the next token (a minute)."""
    submit(url, "rate_waiting", WAITING_RUNS)
    worker = start_worker(url, "rate_waiting", ["rated"], MAX_WORKERS)
    try:
        wait_ready(worker)
        time.sleep(1.0)  # the first run starts; the rest wait for the next token, a minute on
        [percent] = idle_cpu_percent([worker.pid], WAITING_SECONDS)
    finally:
        stop_worker(worker)
    return percent


def measure_loose(backend: str, loose_runs: int) -> dict[str, float]:
    """Drain rates with no rate and with one that never binds, and their ratio."""
    figures = {}
    for scenario in ("rate_none", "rate_loose"):
        with fresh_database(backend) as url:
            figures[f"{scenario}_drain"] = drain(url, scenario, loose_runs)["drain"]
    figures["loose_ratio"] = figures["rate_loose_drain"] / figures["rate_none_drain"]
    return figures


def measure(backend: str, runs: int, loose_runs: int, partition_runs: int) -> dict[str, float]:
    figures: dict[str, float] = {}
    with fresh_database(backend) as url:
        paced = drain(url, "rate_paced", runs)
    figures["paced_ratio"] = paced["claim_rate"] / PACED_RATE
    figures["paced_most"] = paced["most_in_a_second"]
    figures["paced_most_dequeued"] = paced["most_dequeued_in_a_second"]
    figures["paced_cpu"] = paced["cpu"]
    figures["paced_cpu_per_run"] = paced["cpu_per_run"]
    with fresh_database(backend) as url:
        figures["waiting_cpu"] = waiting_cpu(url)
    figures.update(measure_loose(backend, loose_runs))
    for scenario, partitions in (("rate_one_partition", 1), ("rate_partitions", PARTITIONS)):
        with fresh_database(backend) as url:
            figures[f"{scenario}_drain"] = drain(url, scenario, partition_runs, partitions)["drain"]
    figures["partitions_ratio"] = figures["rate_one_partition_drain"] / figures["rate_partitions_drain"]
    return figures


def main() -> None:
    def extra(parser: object) -> None:
        parser.add_argument("--loose-runs", type=int, default=10_000)  # type: ignore[attr-defined]
        parser.add_argument("--partition-runs", type=int, default=50_000)  # type: ignore[attr-defined]
        parser.add_argument("--loose-only", action="store_true")  # type: ignore[attr-defined]

    options = parse_options(__doc__, runs=3000, extra=extra)
    if options.loose_only:
        for backend, samples in repeated(
            options.backends, options.repeat, lambda b: measure_loose(b, options.loose_runs), console
        ).items():
            figures = medians(samples)
            console.print(
                f"{backend}: drain/s no rate {figures['rate_none_drain']:,.0f}; never-binding rate "
                f"{figures['rate_loose_drain']:,.0f}; ratio {figures['loose_ratio']:.2f} (median of {options.repeat})"
            )
        return
    results: dict[str, dict[str, float]] = {}
    for backend, samples in repeated(
        options.backends,
        options.repeat,
        lambda b: measure(b, options.runs, options.loose_runs, options.partition_runs),
        console,
    ).items():
        figures = medians(samples)
        figures["paced_most"] = max(sample["paced_most"] for sample in samples)  # the worst repeat
        figures["paced_most_dequeued"] = max(sample["paced_most_dequeued"] for sample in samples)
        figures["paced_ratio_max"] = max(sample["paced_ratio"] for sample in samples)
        figures["loose_ratio"] = median([sample["loose_ratio"] for sample in samples])
        figures["partitions_ratio"] = median([sample["partitions_ratio"] for sample in samples])
        results[backend] = figures
    header = [
        "backend",
        f"{PACED_RATE}/s drain: achieved / allowed (highest)",
        "most charged in 1 s (RunDequeued events)",
        "worker CPU pacing (% core; ms per run)",
        "worker CPU waiting for a token (% core)",
        "drain/s no rate; never-binding rate; ratio",
        f"s/run {PARTITIONS:,} partitions vs 1 (ratio)",
    ]
    rows = [
        [
            backend,
            f"{f['paced_ratio']:.3f} ({f['paced_ratio_max']:.3f})",
            f"{f['paced_most']:.0f} ({f['paced_most_dequeued']:.0f})",
            f"{f['paced_cpu']:.0f}; {f['paced_cpu_per_run']:.2f}",
            f"{f['waiting_cpu']:.1f}",
            f"{f['rate_none_drain']:,.0f}; {f['rate_loose_drain']:,.0f}; {f['loose_ratio']:.2f}",
            f"{1e6 / f['rate_partitions_drain']:,.0f} us vs {1e6 / f['rate_one_partition_drain']:,.0f} us "
            f"({f['partitions_ratio']:.2f}x)",
        ]
        for backend, f in results.items()
    ]
    title = f"Rate limits: 1 worker process x {MAX_WORKERS}, median of {options.repeat}"
    print_table(console, title, header, rows)
    path = write_markdown(
        "rate_limits",
        title,
        header,
        rows,
        [
            measured_with("python benchmarks/rate_limits.py"),
            f"Paced: {options.runs:,} no-op runs through Rate({PACED_RATE}, '1s') (default burst 10, so at most "
            f"{PACED_RATE + 1 - 10}/s once the burst is spent: docs/rates.md); achieved is claims per second "
            "between the first and the last charge, at the instants the claims charged the rate (stored with "
            "each charge, database clock; aim >= 0.95, never above 1.0); the most charged in any second is the "
            "worst repeat's (at most the limit), beside it the most RunDequeued events in a second (stamped by "
            "the claim statement, a round trip after the charge).",
            f"Waiting: Rate(1, '1m') with {WAITING_RUNS} runs queued; the worker's CPU over {WAITING_SECONDS:.0f} s "
            "after the first start (aim < 5 % of a core).",
            f"Never-binding: {options.loose_runs:,} runs, Rate(1,000,000, '1s') vs no rate (aim >= 0.9).",
            f"Partitions: {options.partition_runs:,} runs over {PARTITIONS:,} rate partitions of 50/s each vs one "
            "budget of 50,000/s, neither binding; wall time per run from the first claim to the last completion "
            "(aim <= 1.5x).",
        ],
    )
    console.print(f"written to {path}")


if __name__ == "__main__":
    main()
