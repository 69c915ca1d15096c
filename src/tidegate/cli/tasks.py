"""`tidegate tasks list`: the tasks registered in the database, what their args must be, the limits
their runs meet, and the worker that last registered each.

A task is registered as `module.qualname` unless its decorator gives `name=`;
this is where a user finds the name to submit by. Everything shown comes from
the store and the engine (`engine.operators.tasks`): the same parameters every submit
by name is checked against and the same limits a claim applies.
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich import box
from rich.table import Table
from rich.text import Text

from tidegate.bootstrap import DEFAULT_DATABASE
from tidegate.cli.connect import existing_store
from tidegate.cli.options import Database, JsonOutput, check_queue_filter
from tidegate.cli.render import print_json, short_time, stdout
from tidegate.engine.operators.tasks import TaskView, task_views

app = typer.Typer(help="Show the tasks registered in the database.", no_args_is_help=True)


@app.command("list")
def list_tasks(
    queue: Annotated[
        str | None,
        typer.Option("--queue", "-q", metavar="QUEUE", help="Only this queue's tasks.", callback=check_queue_filter),
    ] = None,
    json: JsonOutput = False,
    database: Database = DEFAULT_DATABASE,
) -> None:
    """Every registered task: its queue, parameters, the limits its runs meet, and its last worker."""
    with existing_store(database) as store:
        views = task_views(store, queue)
    if json:
        print_json({"tasks": [view.document() for view in views]})
        return
    if not views:
        where = "" if queue is None else f" in queue {queue}"
        hint = "start a worker with your app ('tidegate worker MODULE:APP')"
        stdout.print(Text(f"no tasks registered{where}: {hint}", style="dim"))
        return
    stdout.print(_table(views))


def _table(views: list[TaskView]) -> Table:
    """One row per task; its parameters and limits one per line, so a narrow terminal folds the
    descriptive columns and never an identifier (task, queue, worker)."""
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, padding=(0, 1, 0, 0))
    table.add_column("task", style="bold", no_wrap=True)
    table.add_column("queue", no_wrap=True)
    table.add_column("parameters", overflow="fold")
    table.add_column("limits", overflow="fold")
    table.add_column("last worker", no_wrap=True)
    for view in views:
        definition = view.registration.definition
        queue = Text(definition.queue)
        if view.paused:
            queue.append("\npaused", style="yellow")
        if definition.parameters is None:
            parameters = Text("not recorded", style="dim")  # registered by an older tidegate
        else:
            parameters = Text("\n".join(item.text() for item in definition.parameters.items) or "-")
            if definition.parameters.extra_keywords:
                parameters.append("\n**kwargs")
        limits = Text("\n".join(limit.text() for limit in view.limits) or "none", style="" if view.limits else "dim")
        table.add_row(Text(definition.name), queue, parameters, limits, _worker(view))
    return table


def _worker(view: TaskView) -> Text:
    worker = view.registration.worker_id
    if worker is None:
        return Text("none yet", style="dim")
    return Text.assemble(worker, "\n", (short_time(view.registration.worker_seen_at), "dim"))
