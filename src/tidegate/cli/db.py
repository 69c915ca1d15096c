"""`tidegate db migrate`: bring a database's schema up to this tidegate's version.

Migrating is explicit here (apps migrate on first use unless told not to), so
an operator can upgrade the schema before rolling out new workers. A database
from a newer tidegate is reported, never touched.
"""

from __future__ import annotations

import typer
from rich.text import Text

from tidegate.bootstrap import open_store
from tidegate.cli.options import Database
from tidegate.cli.render import stdout
from tidegate.storage.urls import DEFAULT_DATABASE, masked

app = typer.Typer(help="Manage the database schema.", no_args_is_help=True)


@app.command()
def migrate(database: Database = DEFAULT_DATABASE) -> None:
    """Apply pending schema migrations."""
    store = open_store(database, migrate=False, check=False)
    try:
        before = store.schema_version()
        applied = store.migrate()  # refuses a schema newer than this tidegate
        version = store.schema_version()
    finally:
        store.close()
    if not applied:
        stdout.print(Text.assemble(masked(database), ": already up to date (schema version ", str(version), ")"))
    else:
        versions = ", ".join(str(number) for number in applied)
        stdout.print(
            Text.assemble(
                masked(database), f": schema {before} -> ", (str(version), "bold green"), f" (applied {versions})"
            )
        )
