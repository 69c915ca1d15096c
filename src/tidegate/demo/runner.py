"""The demo, start to finish: fresh database, worker processes, a burst of runs, a summary.

It drives tidegate only through its public faces (the `tidegate worker`
command, `Task.options(...).submit_many` and the engine's operator services, as the CLI
reads the store), so what it shows is what a user gets. The live view is read
from the store every 200 ms; the verdict that no limit was exceeded is
replayed afterwards from the claim and release events the store recorded.
It exits 0 only if every run completed and no scope ever held more runs
than its limit.
"""

from __future__ import annotations

import importlib
import os
import random
import shutil
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.text import Text

from tidegate.bootstrap import DATABASE_ENV, Store, masked, parse_database_url
from tidegate.demo import DEMO_DATABASE
from tidegate.demo.commands import tidegate_command
from tidegate.demo.concurrency import pool_tally, tally
from tidegate.demo.fleet import DemoError, Fleet
from tidegate.demo.live import LiveView, read_sample
from tidegate.demo.summary import Summary, limits_table, tasks_table, totals_table
from tidegate.domain.model import RunStatus
from tidegate.engine.operators import limits, pool_config, runs

POLL_SECONDS = 0.2
STALL_SECONDS = 60.0  # no run finished for this long: something is wrong, stop rather than hang
PRIORITY = 10
PRIORITY_SHARE = 0.1
CHUNK = 50
LOG_DIR = Path(".tidegate")
TENANTS = [("acme", 4), ("globex", 2), ("initech", 2), ("umbrella", 2)]  # name, weight: acme is the busiest
CUSTOMERS = [(1, 4), (2, 1), (3, 1), (4, 1), (5, 1), (6, 1)]  # customer 1 is big, on a higher API tier

Planned = tuple[str, dict[str, Any], int, dict[str, str]]  # task, args, priority, tags


@dataclass(frozen=True)
class DemoPlan:
    runs: int = 300
    workers: int = 2
    max_workers: int = 8
    database: str | None = None  # None: a fresh DEMO_DATABASE

    @property
    def capacity(self) -> int:
        return self.workers * self.max_workers


def run_demo(plan: DemoPlan, console: Console | None = None) -> bool:
    """Run the demo; True if every run completed."""
    console = console or Console(highlight=False)
    url = plan.database or DEMO_DATABASE
    if plan.database is None:
        _remove_sqlite_files(url)
    tasks = _load_tasks(url)
    app = tasks.app
    try:
        store = app.store
        if plan.database is not None and any(runs.status_counts(store).values()):
            raise DemoError(f"the demo needs an empty database, and {masked(url)} already has runs")
        _intro(console, plan, url, tasks)
        fleet = Fleet(url, plan.workers, plan.max_workers, LOG_DIR)
        try:
            with console.status(f"starting {plan.workers} worker processes…"):
                began = time.monotonic()
                app.set_pool_limit(tasks.WAREHOUSE_DB, tasks.WAREHOUSE_DB_LIMIT, lease_duration="1m")
                fleet.start()
                fleet.wait_ready()
            pids = ", ".join(str(worker.process.pid) for worker in fleet.workers)
            _step(console, f"{plan.workers} workers ready in {time.monotonic() - began:.1f}s (pids {pids})")
            began = time.monotonic()
            prioritized = _submit(tasks, plan)
            _step(
                console,
                f"submitted {plan.runs} runs in {(time.monotonic() - began) * 1000:.0f} ms, "
                f"the last {prioritized} with priority {PRIORITY}",
            )
            began = time.monotonic()
            peak = _follow(console, store, plan, fleet)
            _step(console, f"{plan.runs} runs finished in {time.monotonic() - began:.1f}s")
        finally:
            with console.status("stopping workers (SIGTERM)…"):
                codes = fleet.stop()
        clean = all(code == 0 for code in codes)
        _step(console, "workers stopped" + ("" if clean else f" (exit codes {codes})"), ok=clean)
        ended = runs.page_runs(store, limit=plan.runs)
        with console.status("replaying claim and release events…"):
            events = {run.id: runs.run_events(store, run.id) for run in ended}
            pools = {pool.name: pool.limit for pool in pool_config.list_pools(store) if pool.limit is not None}
            tallies = tally(ended, events, limits.rules(store)) + pool_tally(events, pools)
        blocked_example = next((run.id for run in ended if any(e.type == "RunBlocked" for e in events[run.id])), None)
        summary = Summary(ended, plan.runs, plan.capacity, plan.workers, plan.max_workers, peak, tallies)
    finally:
        app.close()
    console.print()
    console.print(totals_table(summary))
    console.print(limits_table(summary, console.width))
    console.print(tasks_table(summary))
    _outro(console, url, summary, blocked_example)
    return summary.all_completed and summary.limits_kept


def _remove_sqlite_files(url: str) -> None:
    """Start clean: the database, its WAL files and its wake-up folder."""
    path = parse_database_url(url).path
    assert path is not None
    for suffix in ("", "-wal", "-shm", "-journal"):
        path.with_name(path.name + suffix).unlink(missing_ok=True)
    shutil.rmtree(path.with_name(path.name + ".wake"), ignore_errors=True)


def _load_tasks(url: str) -> ModuleType:
    """Import the demo tasks with their `App()` pointed at `url` (it reads the variable at import)."""
    os.environ[DATABASE_ENV] = url
    name = "tidegate.demo.tasks"
    module = sys.modules.get(name)
    if module is None:
        return importlib.import_module(name)
    return module if module.app.database == url else importlib.reload(module)


def _plan_runs(count: int) -> Iterator[Planned]:
    """A fixed, varied mix; one run in ten prioritized.

    35% sync_customer (the partitioned external_api queue; customer 1 sends
    the most), 35% resize_image and 20% send_email (tagged with a tenant;
    acme has as much work as the other three together), 5% fetch_quote and
    5% nightly_report (a workflow over four days).
    """
    rng = random.Random(7)
    symbols = ["ACME", "GLOBX", "INITECH", "UMBR", "WAYNE", "STARK"]
    tenants = [name for name, weight in TENANTS for _ in range(weight)]
    customers = [number for number, weight in CUSTOMERS for _ in range(weight)]
    for number in range(count):
        roll = rng.random()
        tags: dict[str, str] = {}
        args: dict[str, Any]
        if roll < 0.35:
            task, args = "sync_customer", {"customer_id": rng.choice(customers)}
        elif roll < 0.70:
            task, args = "resize_image", {"image_id": number, "width": rng.choice([320, 640, 1280])}
            tags = {"tenant": rng.choice(tenants)}
        elif roll < 0.90:
            task, args = "send_email", {"to": f"user{number}@example.com", "subject": "Your receipt"}
            tags = {"tenant": rng.choice(tenants)}
        elif roll < 0.95:
            task, args = "fetch_quote", {"symbol": rng.choice(symbols)}
        else:
            task, args = (
                "nightly_report",
                {"days": [f"2026-11-{day:02d}" for day in range(number % 20 + 1, number % 20 + 5)]},
            )
        yield task, args, PRIORITY if rng.random() < PRIORITY_SHARE else 0, tags


def _submit(tasks: ModuleType, plan: DemoPlan) -> int:
    """Normal runs in chunks (one transaction per task and tags per chunk), then the prioritized ones."""
    planned = list(_plan_runs(plan.runs))
    normal = [item for item in planned if item[2] == 0]
    urgent = [item for item in planned if item[2] != 0]
    for start in range(0, len(normal), CHUNK):
        _submit_batch(tasks, normal[start : start + CHUNK])
    _submit_batch(tasks, urgent)
    return len(urgent)


def _submit_batch(tasks: ModuleType, batch: list[Planned]) -> None:
    groups: dict[tuple[str, int, tuple[tuple[str, str], ...]], list[dict[str, Any]]] = {}
    for task, args, priority, tags in batch:
        groups.setdefault((task, priority, tuple(sorted(tags.items()))), []).append(args)
    for (task, priority, tag_items), many in groups.items():
        getattr(tasks, task).options(priority=priority, tags=dict(tag_items)).submit_many(many)


def _follow(console: Console, store: Store, plan: DemoPlan, fleet: Fleet) -> int:
    """Show progress and the limits at work until every run finished; return the most runs seen running."""
    peak = 0
    view = LiveView(plan.runs, plan.capacity)
    last_finished, last_change = -1, time.monotonic()
    with Live(view, console=console, auto_refresh=False, transient=True) as live:
        while True:
            sample = read_sample(store)
            peak = max(peak, sample.counts[RunStatus.RUNNING])
            view.update(store, sample)
            live.refresh()
            if sample.finished >= plan.runs:
                break
            if sample.finished != last_finished:
                last_finished, last_change = sample.finished, time.monotonic()
            elif time.monotonic() - last_change > STALL_SECONDS:
                raise DemoError(f"no run finished for {STALL_SECONDS:.0f}s; worker logs are in {LOG_DIR}/")
            fleet.check_alive()
            time.sleep(POLL_SECONDS)
    return peak


def _intro(console: Console, plan: DemoPlan, url: str, tasks: ModuleType) -> None:
    console.print(
        Text.assemble(
            ("tidegate demo  ", "bold cyan"),
            f"{plan.runs} runs · {plan.workers} worker processes × {plan.max_workers} = capacity {plan.capacity} · ",
            (masked(url), "dim"),
        ),
        soft_wrap=True,
    )
    console.print(
        Text(
            "tasks: sync_customer (partner API) · resize_image · send_email (flaky) · fetch_quote (async) · "
            "nightly_report (workflow)",
            style="dim",
        )
    )
    console.print(Text(_limits_line(tasks), style="dim"))
    console.print()


def _step(console: Console, message: str, ok: bool = True) -> None:
    console.print(Text.assemble(("✓ " if ok else "✗ ", "green" if ok else "red"), message))


def _limits_line(tasks: ModuleType) -> str:
    return (
        f"limits: {tasks.MAX_CONCURRENT_RUNS} runs at once · external_api: {tasks.API_LIMIT_PER_CUSTOMER} per "
        f"customer_id ({tasks.BIG_CUSTOMER_LIMIT} for customer {tasks.BIG_CUSTOMER}) · "
        f"{tasks.TENANT_LIMIT} per tenant · pool {tasks.WAREHOUSE_DB}: {tasks.WAREHOUSE_DB_LIMIT} queries at once, "
        f"{tasks.REPORT_WINDOW} per report in flight"
    )


def _outro(console: Console, url: str, summary: Summary, blocked_example: str | None) -> None:
    verdict = Text()
    if summary.all_completed:
        verdict.append("every run completed", style="bold green")
    else:
        verdict.append("not every run completed", style="bold red")
    verdict.append(", ")
    exceeded = [item.scope for item in summary.tallies if not item.kept]
    if exceeded:
        verdict.append(f"limits exceeded: {', '.join(exceeded)}", style="bold red")
    else:
        verdict.append(f"no limit exceeded ({len(summary.tallies)} scopes)", style="bold green")
    console.print(verdict)
    console.print(Text("look closer:", style="dim"))
    example = blocked_example or next(
        (run.id for run in summary.runs if run.attempt > 1), summary.runs[0].id if summary.runs else "RUN"
    )
    shown = masked(url)
    pools = [item.scope.removeprefix("pool:") for item in summary.tallies if item.scope.startswith("pool:")]
    cli, hint = tidegate_command()
    for command in (
        f"{cli} limits list -d {shown}",
        *(f"{cli} pools list -d {shown}" for _ in pools[:1]),
        f"{cli} runs show {example} -d {shown}",
        f"{cli} runs list -d {shown}",
    ):
        console.print(Text("  " + command, style="cyan"), soft_wrap=True)
    if hint is not None:
        console.print(Text(f"  ({hint})", style="dim"), soft_wrap=True)
