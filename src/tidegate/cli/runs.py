"""`tidegate runs list|show|cancel|retry`: look at runs, stop them, retry a failed one.

These read the store directly (no task code needed), so an operator can
inspect any database from any machine that reaches it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

import typer
from rich import box
from rich.console import Group, RenderableType
from rich.json import JSON
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from tidegate.bootstrap import DEFAULT_DATABASE, masked
from tidegate.cli import run_list
from tidegate.cli.children import children_table
from tidegate.cli.connect import existing_store
from tidegate.cli.fit import Cell, Column, fitted_table
from tidegate.cli.options import Database, JsonOutput, check_run_id
from tidegate.cli.render import (
    clock_time,
    compact_json,
    compact_metadata,
    long_time,
    print_json,
    seconds_text,
    short_time,
    status_text,
    stdout,
)
from tidegate.cli.scopes import age_text, reason_text
from tidegate.domain import attempts
from tidegate.domain.errors import RunNotFound
from tidegate.domain.model import EventRecord, RunRecord, RunStatus, WorkerRecord
from tidegate.domain.steps import StepRecord, StepStatus
from tidegate.engine.operators import queues
from tidegate.engine.operators import runs as operator_runs
from tidegate.engine.operators.runs import heartbeat_lost_s, is_stuck, workers_of_running

app = typer.Typer(help="List, inspect, cancel and retry runs.", no_args_is_help=True)

_STATUSES = ", ".join(status.value for status in RunStatus)
RunId = Annotated[
    str, typer.Argument(metavar="RUN", help="The run id (as printed by submit or runs list).", callback=check_run_id)
]


app.command("list")(run_list.list_runs)


@app.command("show")
def show(run_id: RunId, database: Database = DEFAULT_DATABASE, json_output: JsonOutput = False) -> None:
    """Show one run: its fields, its result or error, its steps (a workflow's) and its events.

    A run still running past its lease is shown stuck, with its worker's last heartbeat; before that, one
    whose worker's heartbeat is lost says since when."""
    now = datetime.now(UTC)
    with existing_store(database) as store:
        found = operator_runs.detail(store, run_id)
        if found is None:
            raise RunNotFound(f"no run with id {run_id!r} in {masked(database)}")
        run, steps, children, events = found.run, found.steps, found.children, found.events
        workers = workers_of_running(store, [run])
        blocks = queues.live(store)
    if json_output:
        shown = run_list.run_json(run, now, blocks, workers)
        print_json({**shown, "steps": steps, "children": children, "events": events})
        return
    stdout.print(run_details(run, now, workers, events))
    if steps:
        stdout.print(steps_table(steps))
    if children:
        stdout.print(children_table(children))
    stdout.print(events_table(run, events))


def run_details(
    run: RunRecord,
    now: datetime | None = None,
    workers: dict[str, WorkerRecord] | None = None,
    events: list[EventRecord] | None = None,
) -> RenderableType:
    fields = Table.grid(padding=(0, 2))
    fields.add_column(style="dim", no_wrap=True)
    fields.add_column(overflow="fold")
    fields.add_row("run", Text(run.id, style="bold"))
    fields.add_row("status", _status_line(run))
    now = now or datetime.now(UTC)
    warning = _liveness_line(run, now, workers or {})
    if warning is not None:
        fields.add_row("", warning)
    fields.add_row("task", Text(run.task))
    fields.add_row("queue", Text(run.queue))
    if run.parent_id is not None:
        fields.add_row("parent", Text(f"{run.parent_id} (root {run.root_id}, depth {run.depth})"))
    fields.add_row("priority", str(run.priority))
    fields.add_row("attempt", attempts.describe(run.attempts))
    fields.add_row("args", _json(run.args))
    if run.tags:
        fields.add_row("tags", Text(" ".join(f"{key}={value}" for key, value in sorted(run.tags.items()))))
    if run.concurrency_key is not None:
        fields.add_row("concurrency key", Text(run.concurrency_key))
    fields.add_row("submitted", long_time(run.submitted_at))
    if run.scheduled_at > run.submitted_at:
        fields.add_row("scheduled", long_time(run.scheduled_at))
    fields.add_row("started", long_time(run.started_at))
    fields.add_row("finished", _finished_line(run, lost_at(events or [])))
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
        line.append("  (suspect: rescued from a lost worker, it runs in a group; see its events)", style="yellow")
    return line


def _liveness_line(run: RunRecord, now: datetime, workers: dict[str, WorkerRecord]) -> Text | None:
    """A running run whose worker is gone: stuck past its lease, or before that its heartbeat lost."""
    if is_stuck(run, now):
        return _stuck_line(run, now, workers)
    lost = heartbeat_lost_s(run, workers)
    if lost is None:
        return None
    return Text(f"worker heartbeat lost {age_text(lost)} ago: {run_list.LOST_HINT}", style="bold yellow")


def _stuck_line(run: RunRecord, now: datetime, workers: dict[str, WorkerRecord]) -> Text:
    expired = (now - run.lease_expires_at).total_seconds() if run.lease_expires_at is not None else 0.0
    heartbeat = run_list.heartbeat_text(run, workers, now)
    return Text(
        f"stuck: its lease expired {seconds_text(expired)} ago; its worker's last heartbeat: {heartbeat}"
        " (recover it with 'tidegate sweep')",
        style="bold red",
    )


def lost_at(events: list[EventRecord]) -> datetime | None:
    """When the sweep found the run's last attempt lost, the time it was lost (its worker's last
    heartbeat or its lease's expiry), as the rescue event recorded it; None otherwise."""
    last = events[-1] if events else None
    recorded = None if last is None else last.metadata.get("lost_at")
    return datetime.fromisoformat(recorded) if isinstance(recorded, str) else None


def _finished_line(run: RunRecord, lost: datetime | None = None) -> str:
    if run.finished_at is None:
        return "-"
    took = ""
    if run.started_at is not None and lost is not None:
        ran = seconds_text(max(0.0, (lost - run.started_at).total_seconds()))
        took = f"  (found by the sweep; it ran {ran}, until it was lost at {long_time(lost)})"
    elif run.started_at is not None:
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
            Text(step.shown_status, style=_STEP_STYLES[step.shown_status]),
            str(step.attempt),
            short_time(step.started_at, now),
            short_time(step.finished_at, now),
            Text(details, style="dim"),
        )
    return table


_STEP_STYLES = {  # by StepRecord.shown_status
    StepStatus.PENDING.value: "yellow",
    "queued": "blue",
    StepStatus.RUNNING.value: "cyan",
    StepStatus.COMPLETED.value: "green",
    StepStatus.FAILED.value: "bold red",
}


EVENT_COLUMNS = [
    Column("time", drop=1, identifier=True),
    Column("after", drop=2, identifier=True, options={"justify": "right", "style": "dim"}),
    Column("event", identifier=True),
    Column("step"),
    Column("details"),  # worker ids and scope keys in it wrap only between words
]


def events_table(run: RunRecord, events: list[EventRecord]) -> Table:
    """The run's events; a step's (its slot events included) name the step."""
    rows: list[list[Cell]] = [
        [
            clock_time(event.at),
            "+" + seconds_text(max(0.0, (event.at - run.submitted_at).total_seconds())),
            Text(event.type, style=_EVENT_STYLES.get(event.type, "")),
            Text(event.step_key or ""),
            Text(_event_details(event), style="dim"),
        ]
        for event in events
    ]
    return fitted_table(EVENT_COLUMNS, rows, stdout.width, title="events", title_justify="left", title_style="bold")


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
        status = operator_runs.cancel_run(store, run_id)
    line = Text.assemble("run ", (run_id, "bold"), ": ", status_text(status))
    if status is RunStatus.RUNNING:
        line.append("  (cancel requested: its worker will stop it)", style="dim")
    elif status in (RunStatus.COMPLETED, RunStatus.FAILED):
        line.append("  (it had already finished; nothing to cancel)", style="dim")
    stdout.print(line)


@app.command("retry")
def retry(run_id: RunId, database: Database = DEFAULT_DATABASE) -> None:
    """Give a failed or canceled run one more attempt: queued again now, its history kept
    (a RunRetriedManually event); refused in any other status or past an admission ceiling."""
    with existing_store(database) as store:
        run = operator_runs.retry_run(store, run_id)
    stdout.print(
        Text.assemble(
            "run ",
            (run.id, "bold"),
            f" ({run.task}): ",
            status_text(run.status),
            (f"  (attempt {attempts.describe(attempts.following(run.attempts))} next; its history is kept)", "dim"),
        ),
        soft_wrap=True,
    )
