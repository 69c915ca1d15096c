"""Options shared by several commands, declared once so they read the same everywhere."""

from __future__ import annotations

from typing import Annotated

import typer

from tidegate.bootstrap import DATABASE_ENV, DEFAULT_DATABASE
from tidegate.domain import names

DATABASE_HELP = "Database URL: sqlite:///path/to/file.db or postgresql://host/dbname."

Database = Annotated[
    str,
    typer.Option(
        "--database",
        "-d",
        envvar=DATABASE_ENV,
        metavar="URL",
        help=DATABASE_HELP,
        show_default=DEFAULT_DATABASE,
    ),
]


JsonOutput = Annotated[
    bool,
    typer.Option("--json", help="Print one JSON document for scripts instead of a table (no colours, no wrapping)."),
]


def check_run_id(value: str) -> str:
    """Typer callback: a run id that cannot be stored text is refused before any lookup."""
    return names.check_run_id(value)


def check_queue_filter(value: str | None) -> str | None:
    """Typer callback: a `--queue` filter must be a valid queue name (an unknown one lists nothing)."""
    return None if value is None else names.check_name("queue", value)
