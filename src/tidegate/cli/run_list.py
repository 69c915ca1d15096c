"""`tidegate runs list`: runs newest first, filtered by status, queue, task, age; stuck runs flagged.

A running run whose lease expired is *stuck* (`engine.operators.runs.is_stuck`): its
worker stopped renewing it (killed, hung, cut off) and it holds its slots
until a sweep re-queues it. Such a run is never shown as plain "running":
its status reads "stuck", `--stuck` lists only those with their worker's last
heartbeat, and `tidegate sweep` recovers them without a worker. Before that,
as soon as its worker's heartbeat is late (`engine.operators.runs.heartbeat_lost_s`),
its status says since when.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import islice
from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from tidegate.bootstrap import DEFAULT_DATABASE
from tidegate.cli.connect import existing_store
from tidegate.cli.fit import Cell, Column, fitted_table
from tidegate.cli.options import Database, JsonOutput, check_queue_filter
from tidegate.cli.render import print_json, short_time, status_text, stdout
from tidegate.cli.scopes import age_text
from tidegate.domain import attempts
from tidegate.domain.durations import parse_duration
from tidegate.domain.integers import STORED_INT_MAX
from tidegate.domain.model import RunRecord, RunStatus, WorkerRecord
from tidegate.engine.operators import queues
from tidegate.engine.operators.queues import Live
from tidegate.engine.operators.runs import (
    heartbeat_lost_s,
    is_stuck,
    matching_runs,
    status_counts,
    workers_of_running,
)

_STATUSES = ", ".join(status.value for status in RunStatus)
STUCK_HINT = "stuck: running past its lease (its worker stopped renewing it); recover with 'tidegate sweep'"
LOST_HINT = (
    "its worker missed two heartbeats (killed, hung or cut off); "
    "the run is re-queued once its lease expires and a sweep runs"
)


def run_status_text(run: RunRecord, now: datetime, workers: dict[str, WorkerRecord] | None = None) -> Text:
    """The status cell: a stuck run reads "stuck", never plain "running"; one whose worker's
    heartbeat is lost says since when."""
    if is_stuck(run, now):
        return Text("stuck", style="bold red")
    lost = heartbeat_lost_s(run, workers or {})
    if lost is not None:
        return Text.assemble(status_text(run.status), (f" (worker heartbeat lost {age_text(lost)} ago)", "bold yellow"))
    return status_text(run.status)


def heartbeat_text(run: RunRecord, workers: dict[str, WorkerRecord], now: datetime) -> str:
    """Its worker's last heartbeat, as an age; "gone" when the registry no longer has the worker."""
    worker = workers.get(run.worker_id or "")
    if worker is None:
        return "gone"
    return age_text((now - worker.heartbeat_at).total_seconds()) + " ago"


def run_json(
    run: RunRecord, now: datetime, blocks: Live, workers: dict[str, WorkerRecord] | None = None
) -> dict[str, Any]:
    """A run for `--json`: every field, plus whether it is stuck, its worker's last heartbeat (a stuck
    run) and the seconds since it when that heartbeat is lost (as `GET /api/v1/runs`); a queued run's
    block reason is why it waits now, as `queue why` says (`blocks`)."""
    stuck = is_stuck(run, now)
    worker = (workers or {}).get(run.worker_id or "") if stuck else None
    return {
        **{name: getattr(run, name) for name in RunRecord.__dataclass_fields__},
        "declared_max_attempts": run.declared_max_attempts,
        "uncharged_attempts": run.uncharged_attempts,
        "block_reason": blocks.reason(run),
        "stuck": stuck,
        "last_heartbeat": None if worker is None else worker.heartbeat_at,
        "worker_heartbeat_lost_s": heartbeat_lost_s(run, workers or {}),
    }


def list_runs(
    status: Annotated[
        RunStatus | None,
        typer.Option("--status", "-s", metavar="STATUS", help="Only runs in this status: " + _STATUSES + "."),
    ] = None,
    queue: Annotated[
        str | None,
        typer.Option("--queue", "-q", metavar="QUEUE", help="Only runs of this queue.", callback=check_queue_filter),
    ] = None,
    task: Annotated[str | None, typer.Option("--task", "-t", metavar="TASK", help="Only runs of this task.")] = None,
    since: Annotated[
        str | None,
        typer.Option("--since", metavar="DURATION", help="Only runs submitted in the last DURATION (30m, 1h, 2d)."),
    ] = None,
    only_stuck: Annotated[
        bool, typer.Option("--stuck", help="Only running runs whose lease expired, with their worker's heartbeat.")
    ] = False,
    limit: Annotated[
        int,
        typer.Option("--limit", "-n", min=1, max=STORED_INT_MAX, metavar="N", help="At most this many, newest first."),
    ] = 50,
    database: Database = DEFAULT_DATABASE,
    json_output: JsonOutput = False,
) -> None:
    """List runs, newest first; stuck runs (running past their lease) are flagged."""
    age = None if since is None else parse_duration(since, name="--since", minimum=1.0)
    now = datetime.now(UTC)
    cutoff = None if age is None else now - timedelta(seconds=age)
    if only_stuck:
        status = RunStatus.RUNNING
    with existing_store(database) as store:
        filtered = task is not None or cutoff is not None or only_stuck
        found = matching_runs(
            store, now, status=status, queue=queue, task=task, submitted_since=cutoff, only_stuck=only_stuck
        )
        runs = list(islice(found, limit))
        counts = None if filtered else status_counts(store, queue=queue)
        any_stuck = any(is_stuck(run, now) for run in runs)
        workers = workers_of_running(store, runs)
        blocks = queues.live(store)
    if json_output:
        print_json({"runs": [run_json(run, now, blocks, workers) for run in runs]})
        return
    if not runs:
        matching = " matching" if (status or queue or filtered) and not only_stuck else ""
        stdout.print(Text(("no stuck runs" if only_stuck else "no runs") + matching, style="dim"))
        return
    if only_stuck:
        stdout.print(stuck_table(runs, workers, now))
        return
    total = None if counts is None else (counts[status] if status is not None else sum(counts.values()))
    stdout.print(runs_table(runs, total, now, limit, workers))
    if any(heartbeat_lost_s(run, workers) is not None and not is_stuck(run, now) for run in runs):
        stdout.print(Text("worker heartbeat lost: " + LOST_HINT, style="yellow"))
    if any_stuck:
        stdout.print(Text(STUCK_HINT + "; see them with 'tidegate runs list --stuck'", style="yellow"))


def _table(columns: list[Column], rows: list[list[Cell]], caption: str) -> Table:
    gap = 1 if stdout.width >= 100 else 0  # below 100 columns a single space keeps every column whole
    return fitted_table(
        columns, rows, stdout.width, gap=gap, caption=caption, caption_justify="left", caption_style="dim"
    )


RUN_COLUMNS = [
    Column("run", identifier=True, options={"style": "bold"}),
    Column("task"),  # names wrap only between words: never inside one
    Column("queue"),
    Column("status", identifier=True),
    Column("try", drop=4, identifier=True, options={"justify": "right"}),  # attempts.compact: attempt/declared +added
    Column("prio", drop=2, options={"justify": "right"}),
    Column("submitted", drop=3, identifier=True),
    Column("finished", drop=1, identifier=True),
]


def runs_table(
    runs: list[RunRecord],
    total: int | None,
    now: datetime,
    limit: int | None = None,
    workers: dict[str, WorkerRecord] | None = None,
) -> Table:
    if total is not None:
        caption = f"{len(runs)} of {total} runs" + (" (more with --limit)" if total > len(runs) else "")
    else:
        caption = f"{len(runs)} runs" + (" (more with --limit)" if limit is not None and len(runs) >= limit else "")
    local_now = now.astimezone()
    rows: list[list[Cell]] = [
        [
            run.id,
            Text(run.task),
            Text(run.queue),
            run_status_text(run, now, workers),
            attempts.compact(run.attempts),
            str(run.priority),
            short_time(run.submitted_at, local_now),
            short_time(run.finished_at, local_now),
        ]
        for run in runs
    ]
    return _table(RUN_COLUMNS, rows, caption)


STUCK_COLUMNS = [
    Column("run", identifier=True, options={"style": "bold"}),
    Column("task"),
    Column("try", identifier=True, options={"justify": "right"}),
    Column("lease expired", identifier=True, options={"justify": "right"}),
    Column("last heartbeat", identifier=True, options={"justify": "right"}),
]


def stuck_table(runs: list[RunRecord], workers: dict[str, WorkerRecord], now: datetime) -> Table:
    """Stuck runs: since when their lease expired and their worker's last heartbeat."""
    rows: list[list[Cell]] = []
    for run in runs:
        expired = (now - run.lease_expires_at).total_seconds() if run.lease_expires_at is not None else 0.0
        rows.append(
            [
                run.id,
                Text(run.task),
                attempts.compact(run.attempts),
                age_text(expired) + " ago",
                heartbeat_text(run, workers, now),
            ]
        )
    caption = f"{len(runs)} stuck runs (running past their lease): recover them with 'tidegate sweep'"
    return _table(STUCK_COLUMNS, rows, caption)
