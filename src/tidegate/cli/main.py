"""The `tidegate` Typer application: commands are declared in their own modules and wired here.

`main` is the console-script entry point (`tidegate = "tidegate.cli.main:main"`)
and what `python -m tidegate` runs.
"""

from __future__ import annotations

import typer

from tidegate.cli import (
    db,
    demo,
    doctor,
    limits,
    pools,
    queue,
    rates,
    runs,
    schedules,
    serve,
    submit,
    sweep,
    tasks,
    worker,
    workers,
)
from tidegate.cli.errors import ReportingGroup

app = typer.Typer(
    name="tidegate",
    cls=ReportingGroup,
    help="Durable tasks and workflows with concurrency control you can reason about.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,  # an unexpected traceback must not dump args or secrets
    context_settings={"help_option_names": ["-h", "--help"]},
)
app.command("worker")(worker.worker)
app.command("submit")(submit.submit)
app.command("serve")(serve.serve)
app.add_typer(runs.app, name="runs")
app.add_typer(tasks.app, name="tasks")
app.add_typer(queue.app, name="queue")
app.add_typer(limits.app, name="limits")
app.add_typer(pools.app, name="pools")
app.add_typer(rates.app, name="rates")
app.add_typer(db.app, name="db")
app.add_typer(schedules.app, name="schedules")
app.command("sweep")(sweep.sweep)
app.add_typer(workers.app, name="workers")
app.command("demo")(demo.demo)
app.command("doctor")(doctor.run_doctor)


def main(argv: list[str] | None = None, prog_name: str | None = None) -> None:
    """Run the CLI (exits the process with the command's exit code)."""
    app(args=argv, prog_name=prog_name)
