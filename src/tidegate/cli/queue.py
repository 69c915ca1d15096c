"""`tidegate queue list|why|cancel|pause|resume`: the runs that wait, what they wait for, and
the operator's hold on a queue.

`list` shows queued runs in claim order with what holds each back now (the pause,
each full scope: `domain.blocking.verdict` on the live usage, whichever claim path
read the run or none); `why` gives the same answer in full (`engine.operators.why.explain`, also
`GET /api/v1/runs/{id}/why`): every limit, the workers serving the queue when all are
full, the runs holding the blocking slots and an ETA from the blocking scopes' recent
completion rate. Positions are per queue, as `why` counts them, so the two always agree.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated

import typer
from rich.table import Table
from rich.text import Text

from tidegate.bootstrap import DEFAULT_DATABASE, masked
from tidegate.cli.connect import existing_store
from tidegate.cli.errors import CommandError
from tidegate.cli.fit import Cell, Column, fitted_table
from tidegate.cli.options import Database, JsonOutput, check_queue_filter, check_run_id
from tidegate.cli.render import print_json, status_text, stdout
from tidegate.cli.scopes import (
    age_text,
    explanation_body,
    headline,
    now_utc,
    verdict_text,
    waiting_seconds,
)
from tidegate.domain.errors import RunNotFound
from tidegate.domain.integers import STORED_INT_MAX
from tidegate.domain.model import RunStatus
from tidegate.engine.operators import limits, queues
from tidegate.engine.operators import runs as operator_runs
from tidegate.engine.operators.queues import Waiting
from tidegate.engine.operators.why import explain

app = typer.Typer(
    help="Look at queued runs: claim order, what blocks them; cancel one; pause or resume a queue.",
    no_args_is_help=True,
)

RunId = Annotated[
    str, typer.Argument(metavar="RUN", help="The run id (as printed by submit or queue list).", callback=check_run_id)
]
QueueName = Annotated[str, typer.Argument(metavar="QUEUE", help="A declared queue's name.")]


@app.command("list")
def list_queued(
    queue: Annotated[
        str | None,
        typer.Option("--queue", "-q", metavar="QUEUE", help="Only runs of this queue.", callback=check_queue_filter),
    ] = None,
    limit: Annotated[
        int,
        typer.Option(
            "--limit", "-n", min=1, max=STORED_INT_MAX, metavar="N", help="At most this many, in claim order."
        ),
    ] = 50,
    database: Database = DEFAULT_DATABASE,
    json_output: JsonOutput = False,
) -> None:
    """List queued runs in claim order (priority, then age), with what holds each back."""
    with existing_store(database) as store:
        waiting, total = queues.claim_order(store, queue, limit)
        rules = limits.rules(store)
    if json_output:
        listed = [
            {**asdict(each.run), "position": each.position, "block_reason": each.verdict.reason()} for each in waiting
        ]
        print_json({"runs": listed, "total": total, "paused": rules.paused})
        return
    if not waiting:
        stdout.print(Text("no queued runs" + (f" in queue {queue}" if queue else ""), style="dim"))
        return
    shown = {each.run.queue for each in waiting}
    fair = sorted(name for name in shown if name in rules.queues and rules.queues[name].ordering == "fair")
    stdout.print(queued_table(waiting, total, queue, fair))


QUEUED_COLUMNS = [
    Column("pos", identifier=True, options={"justify": "right"}),
    Column("run", identifier=True, options={"style": "bold"}),
    Column("task", drop=4),
    Column("queue"),
    Column("prio", drop=1, options={"justify": "right"}),
    Column("waiting", drop=3, identifier=True, options={"justify": "right"}),
    Column("blocked by", options={"ratio": 1}),  # scope keys wrap only between each other, never inside one
]


def queued_table(waiting: list[Waiting], total: int, queue: str | None, fair: list[str] | None = None) -> Table:
    now = now_utc()
    blocked = not_due = 0
    rows: list[list[Cell]] = []
    for each in waiting:
        run, held = each.run, verdict_text(each.verdict)
        blocked += bool(each.verdict.blocking)
        waited = waiting_seconds(run, now)
        if waited < 0:
            not_due += 1
            shown = "not yet due" + (f" · {held}" if held else "")
            age, reason = Text(f"in {age_text(-waited)}", style="dim"), Text(shown, style="dim")
        else:
            age, reason = Text(age_text(waited)), Text(held, style="yellow")
        rows.append([str(each.position), run.id, Text(run.task), Text(run.queue), str(run.priority), age, reason])
    where = f" in queue {queue}" if queue else ""
    caption = f"{len(waiting)} of {total} queued runs{where}"
    if blocked:
        caption += f" · {blocked} held back by a limit"
    if not_due:
        caption += f" · {not_due} not yet due"
    shown_paused = sorted({each.run.queue for each in waiting if each.verdict.paused})
    if shown_paused:
        caption += f" · paused: {', '.join(shown_paused)} (tidegate queue resume QUEUE)"
    if total > len(waiting):
        caption += " (more with --limit)"
    if fair:
        # Positions rank by priority and age; a fair queue's claim also rotates partitions.
        caption += (
            f"\nfair ordering in {', '.join(fair)}: partitions take turns, so a run may start before one above it"
        )
    gap = 1 if stdout.width >= 100 else 0
    return fitted_table(
        QUEUED_COLUMNS, rows, stdout.width, gap=gap, caption=caption, caption_justify="left", caption_style="dim"
    )


@app.command("why")
def why(run_id: RunId, database: Database = DEFAULT_DATABASE, json_output: JsonOutput = False) -> None:
    """Explain why a run is still queued: its position, every limit and its workers, holders, an ETA.

    For a running workflow: the pools its waiting steps ask for, with holders."""
    with existing_store(database) as store:
        try:
            explanation = explain(store, run_id)
        except RunNotFound:
            raise RunNotFound(f"no run with id {run_id!r} in {masked(database)}") from None
        rules = limits.rules(store) if explanation.run.status is RunStatus.QUEUED else None
    if json_output:
        print_json(explanation)
        return
    now = now_utc()
    stdout.print(headline(explanation, now))
    body = explanation_body(explanation, now, rules)
    if body is not None:
        stdout.print(body)


@app.command("cancel")
def cancel(run_id: RunId, database: Database = DEFAULT_DATABASE) -> None:
    """Cancel a queued run (refused if it is not queued: use 'runs cancel' for a running one)."""
    with existing_store(database) as store:
        run = operator_runs.get_run(store, run_id)
        if run is None:
            raise RunNotFound(f"no run with id {run_id!r} in {masked(database)}")
        if run.status is RunStatus.RUNNING:
            raise CommandError(
                f"run {run_id} is running, not queued: 'tidegate runs cancel {run_id}' asks its worker to stop it"
            )
        if run.status is not RunStatus.QUEUED:
            raise CommandError(f"run {run_id} is {run.status.value}, not queued: nothing to cancel")
        position, total = operator_runs.queue_position(store, run_id)
        status = operator_runs.cancel_run(store, run_id)
    line = Text.assemble("run ", (run_id, "bold"), f" ({run.task}): ", status_text(status))
    if status is RunStatus.CANCELED:
        line.append(f"  (it was queued at position {position} of {total} in queue {run.queue})", style="dim")
        stdout.print(line)
        return
    if status is RunStatus.RUNNING:  # a worker claimed it between our look and the cancel
        line.append("  (it started just before the cancel: cancel requested, its worker will stop it)", style="yellow")
        stdout.print(line)
        return
    raise CommandError(f"run {run_id} finished ({status.value}) before the cancel reached it")


@app.command("pause")
def pause(queue: QueueName, database: Database = DEFAULT_DATABASE) -> None:
    """Pause a queue: its runs stay queued (submits still queue) and none starts until resumed."""
    with existing_store(database) as store:
        changed = queues.pause(store, queue)
    note = "no run of it starts until 'tidegate queue resume'" if changed else "it was already paused"
    stdout.print(Text.assemble("queue ", (queue, "bold"), ": ", ("paused", "yellow"), (f"  ({note})", "dim")))


@app.command("resume")
def resume(queue: QueueName, database: Database = DEFAULT_DATABASE) -> None:
    """Resume a paused queue: its queued runs may start again at once."""
    with existing_store(database) as store:
        changed = queues.resume(store, queue)
    note = "workers were woken" if changed else "it was not paused"
    stdout.print(Text.assemble("queue ", (queue, "bold"), ": ", ("resumed", "green"), (f"  ({note})", "dim")))
