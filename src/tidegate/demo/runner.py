"""The demo, start to finish: fresh database, worker processes, a burst of runs, a summary.

It drives tidegate only through its public faces (the `tidegate worker`
command, `Task.options(...).submit_many`, the store's read verbs), so what it
shows is what a user gets. Progress is read from the store every 100 ms.
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
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.text import Text

from tidegate.cli.render import safe_url
from tidegate.demo import DEMO_DATABASE
from tidegate.demo.fleet import DemoError, Fleet
from tidegate.demo.summary import Summary, tasks_table, totals_table
from tidegate.domain.model import FINISHED_STATUSES, RunStatus
from tidegate.storage.port import Store
from tidegate.storage.urls import DATABASE_ENV, parse_database_url

POLL_SECONDS = 0.1
STALL_SECONDS = 60.0  # no run finished for this long: something is wrong, stop rather than hang
PRIORITY = 10
PRIORITY_SHARE = 0.1
CHUNK = 50
LOG_DIR = Path(".tidegate")


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
        if plan.database is not None and sum(store.status_counts().values()):
            raise DemoError(f"the demo needs an empty database, and {safe_url(url)} already has runs")
        _intro(console, plan, url)
        fleet = Fleet(url, plan.workers, plan.max_workers, LOG_DIR)
        try:
            with console.status(f"starting {plan.workers} worker processes…"):
                began = time.monotonic()
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
            peak = _follow(console, store, plan, fleet)
        finally:
            with console.status("stopping workers (SIGTERM)…"):
                codes = fleet.stop()
        clean = all(code == 0 for code in codes)
        _step(console, "workers stopped" + ("" if clean else f" (exit codes {codes})"), ok=clean)
        runs = store.list_runs(limit=plan.runs)
        summary = Summary(runs, plan.runs, plan.capacity, plan.workers, plan.max_workers, peak)
    finally:
        app.close()
    console.print()
    console.print(totals_table(summary))
    console.print(tasks_table(summary))
    _outro(console, url, summary)
    return summary.all_completed


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


def _plan_runs(count: int) -> Iterator[tuple[str, dict[str, Any], int]]:
    """A fixed, varied mix: half images, 30% emails, 20% quotes; one in ten prioritized."""
    rng = random.Random(7)
    symbols = ["ACME", "GLOBX", "INITECH", "UMBR", "WAYNE", "STARK"]
    for number in range(count):
        roll = rng.random()
        if roll < 0.5:
            task, args = "resize_image", {"image_id": number, "width": rng.choice([320, 640, 1280])}
        elif roll < 0.8:
            task, args = "send_email", {"to": f"user{number}@example.com", "subject": "Your receipt"}
        else:
            task, args = "fetch_quote", {"symbol": rng.choice(symbols)}
        yield task, args, PRIORITY if rng.random() < PRIORITY_SHARE else 0


def _submit(tasks: ModuleType, plan: DemoPlan) -> int:
    """Normal runs in chunks (one transaction per task per chunk), then the prioritized ones."""
    planned = list(_plan_runs(plan.runs))
    normal = [item for item in planned if item[2] == 0]
    urgent = [item for item in planned if item[2] != 0]
    for start in range(0, len(normal), CHUNK):
        _submit_batch(tasks, normal[start : start + CHUNK])
    _submit_batch(tasks, urgent)
    return len(urgent)


def _submit_batch(tasks: ModuleType, batch: list[tuple[str, dict[str, Any], int]]) -> None:
    for name in dict.fromkeys(task for task, _, _ in batch):
        items = [(args, priority) for task, args, priority in batch if task == name]
        getattr(tasks, name).options(priority=items[0][1]).submit_many(args for args, _ in items)


def _follow(console: Console, store: Store, plan: DemoPlan, fleet: Fleet) -> int:
    """Show finished/total until every run finished; return the most runs seen running at once."""
    peak = 0
    columns = (
        SpinnerColumn(),
        TextColumn("[bold]runs"),
        BarColumn(bar_width=36),
        MofNCompleteColumn(),
        TextColumn("{task.fields[detail]}"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console) as progress:
        bar = progress.add_task("runs", total=plan.runs, detail="")
        last_finished, last_change = -1, time.monotonic()
        while True:
            counts = store.status_counts()
            finished = sum(counts[status] for status in FINISHED_STATUSES)
            running = counts[RunStatus.RUNNING]
            peak = max(peak, running)
            detail = f"running [cyan]{running:>3}[/]/{plan.capacity}  queued [yellow]{counts[RunStatus.QUEUED]:>4}[/]"
            progress.update(bar, completed=finished, detail=detail)
            if finished >= plan.runs:
                break
            if finished != last_finished:
                last_finished, last_change = finished, time.monotonic()
            elif time.monotonic() - last_change > STALL_SECONDS:
                raise DemoError(f"no run finished for {STALL_SECONDS:.0f}s; worker logs are in {LOG_DIR}/")
            fleet.check_alive()
            time.sleep(POLL_SECONDS)
    return peak


def _intro(console: Console, plan: DemoPlan, url: str) -> None:
    console.print(
        Text.assemble(
            ("tidegate demo  ", "bold cyan"),
            f"{plan.runs} runs · {plan.workers} worker processes × {plan.max_workers} = capacity {plan.capacity} · ",
            (safe_url(url), "dim"),
        ),
        soft_wrap=True,
    )
    console.print(
        Text(
            "tasks: resize_image (thread, 10-40 ms) · send_email (flaky, retried) · fetch_quote (async)",
            style="dim",
        )
    )
    console.print()


def _step(console: Console, message: str, ok: bool = True) -> None:
    console.print(Text.assemble(("✓ " if ok else "✗ ", "green" if ok else "red"), message))


def _outro(console: Console, url: str, summary: Summary) -> None:
    verdict = (
        Text("every run completed", style="bold green")
        if summary.all_completed
        else Text("not every run completed", style="bold red")
    )
    console.print(verdict)
    console.print(Text("look closer:", style="dim"))
    example = next((run.id for run in summary.runs if run.attempt > 1), summary.runs[0].id if summary.runs else "RUN")
    shown = safe_url(url)
    for command in (f"tidegate runs list -d {shown}", f"tidegate runs show {example} -d {shown}"):
        console.print(Text("  " + command, style="cyan"), soft_wrap=True)
