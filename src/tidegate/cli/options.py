"""Options shared by several commands, declared once so they read the same everywhere."""

from __future__ import annotations

from typing import Annotated

import typer

from tidegate.storage.urls import DATABASE_ENV, DEFAULT_DATABASE

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
