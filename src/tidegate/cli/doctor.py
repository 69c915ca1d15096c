"""`tidegate doctor`: is this deployment healthy? One pass/warn/fail line per check (`engine.operators.doctor`).

The exit code is the worst finding's: 0 pass, 1 warn, 2 fail, so a script or a
readiness probe can act on it; `--json` gives the same findings as `GET /api/v1/doctor`.
"""

from __future__ import annotations

from contextlib import ExitStack

import typer
from rich.text import Text

from tidegate.app import settings
from tidegate.bootstrap import DEFAULT_DATABASE, Store, open_store
from tidegate.cli.connect import check_exists
from tidegate.cli.errors import CommandError
from tidegate.cli.options import Database, JsonOutput
from tidegate.cli.render import print_json, stdout
from tidegate.domain import doctor
from tidegate.domain.clock import SYSTEM_CLOCK
from tidegate.domain.doctor import Diagnosis, Level
from tidegate.engine.operators.doctor import diagnose

STYLES = {Level.PASS: "green", Level.WARN: "yellow", Level.FAIL: "bold red"}


def run_doctor(database: Database = DEFAULT_DATABASE, json_output: JsonOutput = False) -> None:
    """Check the store, its schema and clock, the workers and the queues they serve, pools, stuck
    runs, late schedules, the retention and PostgreSQL's connection limit. Exit code: 0 pass, 1 warn, 2 fail."""
    diagnosis = _diagnose(database)
    if json_output:
        print_json(diagnosis.document())
    else:
        for finding in diagnosis.findings:
            line = Text(f"{finding.level.value:<5} ", style=STYLES[finding.level])
            line.append(f"{finding.check:<12} ", style="bold")
            line.append(finding.message)
            stdout.print(line)
    raise typer.Exit(diagnosis.exit_code)


def _diagnose(database: str) -> Diagnosis:
    try:
        check_exists(database)  # a path typed wrong must not create an empty database
    except CommandError as error:
        return Diagnosis((doctor.unreachable(str(error)),))
    retention = settings.duration_setting("TIDEGATE_RETENTION")
    with ExitStack() as opened:

        def store() -> Store:
            found = open_store(database, migrate=False, check=False)  # the doctor reports the schema itself
            opened.callback(found.close)
            return found

        return diagnose(store, SYSTEM_CLOCK, retention)
