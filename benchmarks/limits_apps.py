"""Apps (tasks plus limit declarations) for the run-level limit benchmarks.

A scenario is built the same way in the benchmark process (which submits) and
in its worker processes (`limits_worker.py`), so both register the same
limits. Also: reading the database's own timestamps, and CPU time from /proc.
"""

from __future__ import annotations

import json
import math
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

import tidegate
from rate_apps import RATE_SCENARIOS
from tidegate import Concurrency, Partition, RunQueueConfig, TagConcurrencyLimit

HERE = Path(__file__).parent

# cost_of_limits: loose limits that should hardly ever bind.
COST_PARTITIONS = 10
COST_TENANTS = 10
COST_GLOBAL_CAP = 1000
COST_QUEUE_LIMIT = 100  # per partition (by the `customer` arg)
COST_TAG_LIMIT = 200  # per unique tenant

MAKESPAN_LIMIT = 4
MAKESPAN_SLEEP = 0.05


def makespan_app(scenario: str, url: str) -> tidegate.App:
    """`makespan`: a queue limit of MAKESPAN_LIMIT; `makespan_local`: no gate (the baseline caps concurrency
    with one worker's max_workers instead)."""
    app = tidegate.App(url)
    limit = MAKESPAN_LIMIT if scenario == "makespan" else None
    app.queue("limited", concurrency=Concurrency(global_limit=limit))

    @app.task(queue="limited", name="sleep50")
    def sleep50() -> list[float]:
        started = time.time()
        time.sleep(MAKESPAN_SLEEP)
        return [started, time.time()]  # the execution interval, as this process saw it

    return app


def cost_app(scenario: str, url: str) -> tidegate.App:
    """`limited`: the loose global, partition and tag limits of cost_of_limits; `unlimited`: the same task bare."""
    limited = scenario == "limited"
    run_queue = (
        RunQueueConfig(
            max_concurrent_runs=COST_GLOBAL_CAP,
            tag_concurrency_limits=[TagConcurrencyLimit("tenant", COST_TAG_LIMIT, per_unique_value=True)],
        )
        if limited
        else None
    )
    app = tidegate.App(url, run_queue=run_queue)
    if limited:
        partition = Partition(by_args=["customer"])
        app.queue("cost", concurrency=Concurrency(global_limit=COST_QUEUE_LIMIT, partition=partition))

    @app.task(queue="cost", name="cost_noop")
    def cost_noop(customer: str = "") -> None:
        """Does nothing: measures the gates, not the task."""

    return app


def backlog_app(scenario: str, url: str) -> tidegate.App:
    """One slot per partition `p`, so a held partition blocks its whole backlog."""
    app = tidegate.App(url)
    app.queue("blocked", concurrency=Concurrency(global_limit=1, partition=Partition(by_args=["p"])))

    @app.task(queue="blocked", name="backlog_noop")
    def backlog_noop(p: str = "") -> None:
        """Does nothing."""

    return app


def handoff_app(scenario: str, url: str) -> tidegate.App:
    """One slot: each run can start only once the one before it has freed it."""
    app = tidegate.App(url)
    app.queue("handoff", concurrency=Concurrency(global_limit=1))

    @app.task(queue="handoff", name="handoff_noop")
    def handoff_noop() -> None:
        """Zero work: the gap between runs is all hand-off."""

    return app


def pingpong_app(scenario: str, url: str) -> tidegate.App:
    """Two queues, one worker process each, behind one global slot: every run submits the next into the other
    queue, which the other process can only claim once this run's completion has freed the slot."""
    app = tidegate.App(url, run_queue=RunQueueConfig(max_concurrent_runs=1))
    app.queue("ping")
    app.queue("pong")

    @app.task(queue="ping", name="bounce")
    def bounce(n: int, total: int) -> None:
        if n + 1 < total:
            bounce.options(queue="pong" if n % 2 == 0 else "ping").submit(n=n + 1, total=total)

    return app


def soak_app(scenario: str, url: str) -> tidegate.App:
    """The soak: a sustained stream of no-op runs on `soak` (no limit), and bursts on `handoff`
    (one slot), whose gaps between one run's completion and the next one's claim are the hand-off."""
    app = handoff_app(scenario, url)
    app.queue("soak")

    @app.task(queue="soak", name="soak_noop")
    def soak_noop() -> None:
        """Zero work: the soak measures the store as it ages, not the task."""

    return app


SCENARIOS: dict[str, Callable[[str, str], tidegate.App]] = {
    "makespan": makespan_app,
    "makespan_local": makespan_app,
    "unlimited": cost_app,
    "limited": cost_app,
    "backlog": backlog_app,
    "handoff": handoff_app,
    "pingpong": pingpong_app,
    "soak": soak_app,
}
SCENARIOS.update(RATE_SCENARIOS)  # benchmarks/rate_limits.py's


def build(scenario: str, url: str) -> tidegate.App:
    """The app of one scenario against `url`."""
    if scenario not in SCENARIOS:
        raise SystemExit(f"unknown scenario {scenario!r}")
    return SCENARIOS[scenario](scenario, url)


def start_worker(
    url: str,
    scenario: str,
    queues: list[str],
    max_workers: int,
    *,
    drain: bool = False,
    wakeups: bool = True,
    poll_interval: str | None = None,
    fill_order: bool = False,
) -> subprocess.Popen[bytes]:
    """A worker process running `limits_worker.py`; it prints READY once serving."""
    env = {**os.environ, "TIDEGATE_DATABASE": url}
    command = [
        sys.executable,
        str(HERE / "limits_worker.py"),
        scenario,
        ",".join(queues),
        str(max_workers),
    ]
    if drain:
        command.append("--drain")
    if not wakeups:
        command.append("--no-wakeups")
    if poll_interval is not None:
        command += ["--poll-interval", poll_interval]
    if fill_order:
        command.append("--fill-order")
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE)


def wait_ready(worker: subprocess.Popen[bytes]) -> None:
    assert worker.stdout is not None
    if worker.stdout.readline().strip() != b"READY":
        raise SystemExit(f"a worker process did not start (exit code {worker.wait()})")


def worker_cycles(worker: subprocess.Popen[bytes]) -> int:
    """How many store cycles the worker process has made (it answers SIGUSR1 on stdout)."""
    assert worker.stdout is not None
    worker.send_signal(signal.SIGUSR1)
    line = worker.stdout.readline().split()
    if len(line) != 2 or line[0] != b"CYCLES":
        raise SystemExit(f"unexpected answer from a worker process: {line!r}")
    return int(line[1])


def stop_worker(worker: subprocess.Popen[bytes]) -> None:
    if worker.poll() is None:
        worker.terminate()
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()


def query(url: str, sql_sqlite: str, sql_postgres: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Rows of a read-only query; times come back as epoch seconds on both backends."""
    if url.startswith("sqlite"):
        embedded = sqlite3.connect(url[len("sqlite:///") :], timeout=30)
        try:
            return embedded.execute(sql_sqlite, params).fetchall()
        finally:
            embedded.close()
    with psycopg.connect(url) as connection:
        return connection.execute(sql_postgres, params).fetchall()


def event_times(url: str, queue: str, kinds: tuple[str, ...]) -> list[tuple[str, str, float, str | None]]:
    """(run id, event type, epoch seconds, worker id of a RunDequeued) for a queue's runs, in event order."""
    placeholders = ",".join("?" for _ in kinds)
    sqlite_sql = (
        "SELECT e.run_id, e.type, e.at, json_extract(e.metadata, '$.worker') FROM tidegate_event_log e "
        f"JOIN tidegate_runs r ON r.id = e.run_id WHERE r.queue = ? AND e.type IN ({placeholders}) ORDER BY e.id"
    )
    pg_placeholders = ",".join("%s" for _ in kinds)
    pg_sql = (
        "SELECT e.run_id, e.type, extract(epoch FROM e.at)::float8, e.metadata->>'worker' FROM tidegate_event_log e "
        f"JOIN tidegate_runs r ON r.id = e.run_id WHERE r.queue = %s AND e.type IN ({pg_placeholders}) ORDER BY e.id"
    )
    return [(run, kind, at, worker) for run, kind, at, worker in query(url, sqlite_sql, pg_sql, (queue, *kinds))]


def charge_instants(url: str, queue: str) -> list[int]:
    """The instants a queue's runs were charged their rate, in ns of the database's clock, sorted: what
    the rate's guarantee is about, exact integers as each claim stored them with its charge (`rate_charge`,
    `domain.rates.Charge.at`; one per run: a charge given back was cleared). A RunDequeued event's time is
    its claim statement's, a round trip after the charge, by a lag that varies from claim to claim."""
    rows = query(
        url,
        "SELECT r.rate_charge FROM tidegate_runs r WHERE r.queue = ? AND r.rate_charge IS NOT NULL",
        "SELECT r.rate_charge FROM tidegate_runs r WHERE r.queue = %s AND r.rate_charge IS NOT NULL",
        (queue,),
    )
    return sorted(json.loads(stored)[0][6] for (stored,) in rows)  # Charge.to_json: [..., at]; one window


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (all its threads), from /proc/PID/stat."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime (fields 14 and 15)


def idle_cpu_percent(pids: list[int], seconds: float) -> list[float]:
    """% of one core each process used over `seconds` (one sample, the processes left alone)."""
    before = [cpu_seconds(pid) for pid in pids]
    started = time.monotonic()
    time.sleep(seconds)
    elapsed = time.monotonic() - started
    return [100 * (cpu_seconds(pid) - was) / elapsed for pid, was in zip(pids, before, strict=True)]


def percentile(values: list[float], fraction: float) -> float:
    """Nearest-rank percentile (p99 of 300 values is the 297th smallest)."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), math.ceil(round(fraction * len(ordered), 9))))
    return ordered[rank - 1]
