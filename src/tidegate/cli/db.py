"""`tidegate db migrate|prune`: bring a database's schema up to this tidegate's version; delete old runs.

Migrating is explicit here (apps migrate on first use unless told not to), so
an operator can upgrade the schema before rolling out new workers. A database
from a newer tidegate is reported, never touched. Pruning is what the sweeper
does after each sweep (`TIDEGATE_RETENTION`), by hand and to the end, batch
after short batch (engine/operators/retention.py).
"""

from __future__ import annotations

from contextlib import closing
from typing import Annotated

import typer
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.text import Text

from tidegate.bootstrap import DEFAULT_DATABASE, masked, open_store
from tidegate.cli.connect import existing_store
from tidegate.cli.options import Database
from tidegate.cli.render import stderr, stdout
from tidegate.domain.durations import format_duration, parse_duration
from tidegate.domain.retention import PruneReport
from tidegate.domain.tunables import TUNABLES
from tidegate.engine.operators import schema
from tidegate.engine.operators.retention import prune as prune_runs

RETENTION = TUNABLES["TIDEGATE_RETENTION"]

app = typer.Typer(help="Manage the database schema.", no_args_is_help=True)


@app.command()
def migrate(database: Database = DEFAULT_DATABASE) -> None:
    """Apply pending schema migrations."""
    with closing(open_store(database, migrate=False, check=False)) as store:
        migrated = schema.migrate(store)  # refuses a schema newer than this tidegate
    if not migrated.applied:
        stdout.print(
            Text.assemble(masked(database), ": already up to date (schema version ", str(migrated.version), ")")
        )
    else:
        versions = ", ".join(str(number) for number in migrated.applied)
        stdout.print(
            Text.assemble(
                masked(database),
                f": schema {migrated.before} -> ",
                (str(migrated.version), "bold green"),
                f" (applied {versions})",
            )
        )


@app.command()
def prune(
    older_than: Annotated[
        str,
        typer.Option(
            "--older-than",
            metavar="DURATION",
            envvar="TIDEGATE_RETENTION",
            help="Delete finished runs (completed, failed, canceled) that ended longer ago than this.",
        ),
    ] = RETENTION.default,
    database: Database = DEFAULT_DATABASE,
) -> None:
    """Delete finished runs older than a duration, with their events and step rows; never a queued or running run."""
    age = parse_duration(
        older_than, name="--older-than (or TIDEGATE_RETENTION)", minimum=RETENTION.minimum, maximum=RETENTION.maximum
    )
    total = PruneReport()
    with (
        existing_store(database) as store,
        Progress(
            SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=stderr, transient=True
        ) as progress,
    ):
        shown = progress.add_task(f"pruning runs older than {format_duration(age)}", total=None)

        def advance(batch: PruneReport) -> None:
            total.add(batch)
            progress.update(shown, description=f"pruned {total.runs} runs older than {format_duration(age)}")

        prune_runs(store, age, on_batch=advance)
    stdout.print(
        Text.assemble(
            "pruned ",
            (str(total.runs), "bold"),
            f" finished runs older than {format_duration(age)}",
            f" ({total.events} events, {total.steps} step rows, {total.ticks} schedule ticks)",
        )
    )
