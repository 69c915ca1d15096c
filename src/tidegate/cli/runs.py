"""`tidegate runs list|show|cancel`: look at runs and stop them.

These read the store directly (no task code needed), so an operator can
inspect any database from any machine that reaches it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

import typer
from rich import box
from rich.console import Group, RenderableType
from rich.json import JSON
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from tidegate.cli.connect import existing_store
from tidegate.cli.options import Database, check_queue_filter, check_run_id
from tidegate.cli.render import (
    clock_time,
    compact_json,
    compact_metadata,
    long_time,
    seconds_text,
    short_time,
    status_text,
    stdout,
)
from tidegate.cli.scopes import reason_text
from tidegate.domain.errors import RunNotFound
from tidegate.domain.model import EventRecord, RunRecord, RunStatus
from tidegate.domain.steps import StepRecord, StepStatus
from tidegate.storage.urls import DEFAULT_DATABASE, masked

app = typer.Typer(help="List, inspect and cancel runs.", no_args_is_help=True)

_STATUSES = ", ".join(status.value for status in RunStatus)
RunId = Annotated[
    str, typer.Argument(metavar="RUN", help="The run id (as printed by submit or runs list).", callback=check_run_id)
]


@app.command("list")
def list_runs(
    status: Annotated[
        RunStatus | None,
        typer.Option("--status", "-s", metavar="STATUS", help="Only runs in this status: " + _STATUSES + "."),
    ] = None,
    queue: Annotated[
        str | None,
        typer.Option("--queue", "-q", metavar="QUEUE", help="Only runs of this queue.", callback=check_queue_filter),
    ] = None,
    limit: Annotated[
        int, typer.Option("--limit", "-n", min=1, metavar="N", help="At most this many, newest first.")
    ] = 50,
    database: Database = DEFAULT_DATABASE,
) -> None:
    """List runs, newest first."""
    with existing_store(database) as store:
        runs = store.list_runs(status=status, queue=queue, limit=limit)
        counts = store.status_counts(queue=queue)
    total = counts[status] if status is not None else sum(counts.values())
    if not runs:
        stdout.print(Text("no runs" + (" matching" if status or queue else ""), style="dim"))
        return
    stdout.print(runs_table(runs, total))


def runs_table(runs: list[RunRecord], total: int) -> Table:
    now = datetime.now().astimezone()
    caption = f"{len(runs)} of {total} runs" + (" (more with --limit)" if total > len(runs) else "")
    gap = 1 if stdout.width >= 100 else 0  # below 100 columns a single space keeps every column whole
    table = Table(
        box=box.SIMPLE_HEAD,
        show_edge=False,
        padding=(0, gap, 0, 0),
        caption=caption,
        caption_justify="left",
        caption_style="dim",
    )
    table.add_column("run", no_wrap=True, style="bold")
    table.add_column("task", overflow="fold", min_width=6)  # the only columns allowed to wrap
    table.add_column("queue", overflow="fold", min_width=6)
    table.add_column("status", no_wrap=True)
    table.add_column("try", justify="right", no_wrap=True)  # attempt/max_attempts
    table.add_column("prio", justify="right", no_wrap=True)
    table.add_column("submitted", no_wrap=True)
    table.add_column("finished", no_wrap=True)
    for run in runs:
        table.add_row(
            run.id,
            Text(run.task),
            Text(run.queue),
            status_text(run.status),
            f"{run.attempt}/{run.max_attempts}",
            str(run.priority),
            short_time(run.submitted_at, now),
            short_time(run.finished_at, now),
        )
    return table


@app.command("show")
def show(run_id: RunId, database: Database = DEFAULT_DATABASE) -> None:
    """Show one run: its fields, its result or error, its steps (a workflow's) and its events."""
    with existing_store(database) as store:
        run = store.get_run(run_id)
        if run is None:
            raise RunNotFound(f"no run with id {run_id!r} in {masked(database)}")
        steps = store.run_steps(run_id)
        events = store.run_events(run_id)
    stdout.print(run_details(run))
    if steps:
        stdout.print(steps_table(steps))
    stdout.print(events_table(run, events))


def run_details(run: RunRecord) -> RenderableType:
    fields = Table.grid(padding=(0, 2))
    fields.add_column(style="dim", no_wrap=True)
    fields.add_column(overflow="fold")
    fields.add_row("run", Text(run.id, style="bold"))
    fields.add_row("status", _status_line(run))
    fields.add_row("task", Text(run.task))
    fields.add_row("queue", Text(run.queue))
    fields.add_row("priority", str(run.priority))
    fields.add_row("attempt", f"{run.attempt} of {run.max_attempts}")
    fields.add_row("args", _json(run.args))
    if run.tags:
        fields.add_row("tags", Text(" ".join(f"{key}={value}" for key, value in sorted(run.tags.items()))))
    if run.concurrency_key is not None:
        fields.add_row("concurrency key", Text(run.concurrency_key))
    fields.add_row("submitted", long_time(run.submitted_at))
    if run.scheduled_at > run.submitted_at:
        fields.add_row("scheduled", long_time(run.scheduled_at))
    fields.add_row("started", long_time(run.started_at))
    fields.add_row("finished", _finished_line(run))
    if run.worker_id is not None:
        fields.add_row("worker", Text(run.worker_id))
    if run.status is RunStatus.RUNNING and run.lease_expires_at is not None:
        fields.add_row("lease until", long_time(run.lease_expires_at))
    parts: list[RenderableType] = [fields]
    if run.status is RunStatus.COMPLETED:
        parts.append(Panel(_json(run.result), title="result", title_align="left", border_style="green", expand=False))
    elif run.error:
        title, colour = ("canceled", "magenta") if run.status is RunStatus.CANCELED else ("error", "red")
        parts.append(Panel(Text(run.error), title=title, title_align="left", border_style=colour, expand=False))
    parts.append(Text())
    return Group(*parts)


def _json(value: object) -> RenderableType:
    """Small values on one line, bigger ones indented."""
    text = compact_json(value)
    return JSON(text, indent=None) if len(text) <= 60 else JSON.from_data(value)


def _status_line(run: RunRecord) -> Text:
    line = status_text(run.status)
    if run.cancel_requested and not run.status.finished:
        line.append("  (cancel requested)", style="magenta")
    if run.suspect and not run.status.finished:
        line.append("  (suspect: rescued from a lost worker, it runs alone next; see its events)", style="yellow")
    return line


def _finished_line(run: RunRecord) -> str:
    if run.finished_at is None:
        return "-"
    took = ""
    if run.started_at is not None:
        took = f"  (ran {seconds_text((run.finished_at - run.started_at).total_seconds())})"
    return long_time(run.finished_at) + took


def steps_table(steps: list[StepRecord]) -> Table:
    """A workflow's steps as checkpointed: what is done, running, waiting for slots, or failed."""
    now = datetime.now().astimezone()
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, title="steps", title_justify="left", title_style="bold")
    table.add_column("step", no_wrap=True, style="bold")
    table.add_column("status", no_wrap=True)
    table.add_column("attempt", justify="right", no_wrap=True)
    table.add_column("started", no_wrap=True)
    table.add_column("finished", no_wrap=True)
    table.add_column("details", overflow="fold")
    for step in steps:
        details = ""
        if step.waiting_for:
            details = "waiting for " + ", ".join(
                f"{scope} x{slots}" for scope, slots in sorted(step.waiting_for.items())
            )
        elif step.error:
            details = step.error.strip().splitlines()[0]
        table.add_row(
            Text(step.step_key),
            Text(step.status.value, style=_STEP_STYLES[step.status]),
            str(step.attempt),
            short_time(step.started_at, now),
            short_time(step.finished_at, now),
            Text(details, style="dim"),
        )
    return table


_STEP_STYLES = {
    StepStatus.PENDING: "yellow",
    StepStatus.RUNNING: "cyan",
    StepStatus.COMPLETED: "green",
    StepStatus.FAILED: "bold red",
}


def events_table(run: RunRecord, events: list[EventRecord]) -> Table:
    """The run's events; a step's (its slot events included) name the step."""
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, title="events", title_justify="left", title_style="bold")
    table.add_column("time", no_wrap=True)
    table.add_column("after", justify="right", no_wrap=True, style="dim")
    table.add_column("event", no_wrap=True)
    table.add_column("step", no_wrap=True)
    table.add_column("details", overflow="fold")
    for event in events:
        table.add_row(
            clock_time(event.at),
            "+" + seconds_text(max(0.0, (event.at - run.submitted_at).total_seconds())),
            Text(event.type, style=_EVENT_STYLES.get(event.type, "")),
            Text(event.step_key or ""),
            Text(_event_details(event), style="dim"),
        )
    return table


def _event_details(event: EventRecord) -> str:
    """A block reason reads as `queue limits list` shows scopes; other details as key=value."""
    if event.type == "RunBlocked" and isinstance(event.metadata.get("blocked_by"), list):
        return "by " + reason_text(event.metadata["blocked_by"])
    return compact_metadata(event.metadata)


_EVENT_STYLES = {
    "RunCompleted": "green",
    "RunFailed": "red",
    "StepCompleted": "green",
    "StepFailed": "red",
    "StepSlotWaiting": "yellow",
    "RunRetried": "yellow",
    "RunCanceled": "magenta",
    "RunRequeued": "yellow",
    "RunBlocked": "yellow",
}


@app.command("cancel")
def cancel(run_id: RunId, database: Database = DEFAULT_DATABASE) -> None:
    """Cancel a run: at once if queued; if running, its worker is told to stop it."""
    with existing_store(database) as store:
        status = store.cancel_run(run_id)
    line = Text.assemble("run ", (run_id, "bold"), ": ", status_text(status))
    if status is RunStatus.RUNNING:
        line.append("  (cancel requested: its worker will stop it)", style="dim")
    elif status in (RunStatus.COMPLETED, RunStatus.FAILED):
        line.append("  (it had already finished; nothing to cancel)", style="dim")
    stdout.print(line)
