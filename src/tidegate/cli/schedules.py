"""`tidegate schedules list|pause|resume|remove`: the stored schedules and when they fire.

Schedules are declared in code (`app.schedule`) and stored when a worker
starts; every worker fires them. A pause is kept in the store, apart from the
declaration, so a worker restarting with the same code never undoes it; a
resume fires from the next tick on (the ticks of the pause are not made up).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

import typer
from rich import box
from rich.table import Table
from rich.text import Text

from tidegate.bootstrap import DEFAULT_DATABASE
from tidegate.cli.connect import existing_store
from tidegate.cli.options import Database, JsonOutput
from tidegate.cli.render import print_json, short_time, stdout
from tidegate.domain.schedules import check_schedule_name
from tidegate.engine.operators import schedules

app = typer.Typer(help="Show the schedules and when they fire; pause, resume or remove one.", no_args_is_help=True)

ScheduleName = Annotated[str, typer.Argument(metavar="NAME", help="The schedule's name (schedules list).")]


@app.command("list")
def list_schedules(database: Database = DEFAULT_DATABASE, json_output: JsonOutput = False) -> None:
    """Every schedule: its task, cron expression and time zone, next and last fire, and whether paused."""
    with existing_store(database) as store:
        records = schedules.list_schedules(store)
    if json_output:
        print_json({"schedules": [record.document() for record in records]})
        return
    if not records:
        stdout.print(
            Text("no schedules: declare one with app.schedule(task, cron=...) and start a worker", style="dim")
        )
        return
    gap = 1 if stdout.width >= 100 else 0  # narrow terminals: the columns' own divider is gap enough
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, padding=(0, gap, 0, 0))
    # Identifiers are never cut (they are copied into commands); the descriptive columns fold instead.
    widest = {column: max(len(getattr(record.definition, column)) for record in records) for column in ("name", "task")}
    table.add_column("schedule", no_wrap=True, style="bold", min_width=widest["name"])
    table.add_column("task", no_wrap=True, min_width=widest["task"])
    table.add_column("cron", overflow="fold", min_width=4)
    table.add_column("tz", overflow="fold", min_width=3)
    table.add_column("next fire", overflow="fold", min_width=5)
    table.add_column("last fire", overflow="fold", min_width=5)
    table.add_column("paused", overflow="fold", min_width=2)
    for record in records:
        definition = record.definition
        table.add_row(
            Text(definition.name),
            Text(definition.task),
            Text(definition.cron),
            Text(definition.timezone),
            "-" if record.paused else short_time(record.next_fire_at),
            short_time(record.last_fire_at),
            Text("paused", style="bold yellow") if record.paused else Text("no", style="dim"),
        )
    stdout.print(table)


@app.command("pause")
def pause(name: ScheduleName, database: Database = DEFAULT_DATABASE) -> None:
    """Stop a schedule from firing until it is resumed (kept across worker restarts)."""
    _set(database, name, paused=True)


@app.command("resume")
def resume(name: ScheduleName, database: Database = DEFAULT_DATABASE) -> None:
    """Fire a paused schedule again, from its next tick on."""
    _set(database, name, paused=False)


@app.command("remove")
def remove(name: ScheduleName, database: Database = DEFAULT_DATABASE) -> None:
    """Delete a stored schedule (its runs stay); a worker whose code still declares it stores it again."""
    check_schedule_name(name)
    with existing_store(database) as store:
        schedules.remove_schedule(store, name)
    stdout.print(Text.assemble("schedule ", (name, "bold"), " removed"))


def _set(database: str, name: str, *, paused: bool) -> None:
    check_schedule_name(name)
    with existing_store(database) as store:
        changed = schedules.set_paused(store, name, paused, datetime.now(UTC))
    state = "paused" if paused else "resumed"
    note = "" if changed else f" (it was already {'paused' if paused else 'running'})"
    stdout.print(Text.assemble("schedule ", (name, "bold"), f" {state}{note}"))
