"""`tidegate worker MODULE:APP`: run a worker in the foreground.

The database: an app built with `App()` reads $TIDEGATE_DATABASE when its
module is imported, so `--database` is exported to the environment before the
import and the app picks it up. An app built with an explicit URL keeps it;
if `--database` (or the variable) names another one, the worker refuses to
start rather than serve one database while the operator believes another.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer
from rich.text import Text

from tidegate.app.settings import log_format as chosen_log_format
from tidegate.bootstrap import DATABASE_ENV, masked
from tidegate.cli.errors import CommandError
from tidegate.cli.loading import load_app_for
from tidegate.cli.logs import configure_logging
from tidegate.cli.options import DATABASE_HELP
from tidegate.cli.render import stdout
from tidegate.domain.tunables import DEFAULT_MAX_WORKERS
from tidegate.worker.metrics import serve_metrics


def worker(
    target: Annotated[str, typer.Argument(metavar="MODULE:APP", help="Where your tidegate.App is, e.g. tasks:app.")],
    queue: Annotated[
        list[str] | None,
        typer.Option("--queue", "-q", metavar="QUEUE", help="Serve this queue (repeatable; default: all the app's)."),
    ] = None,
    max_workers: Annotated[
        int, typer.Option(min=1, metavar="N", help="Capacity: runs executed at once.")
    ] = DEFAULT_MAX_WORKERS,
    drain: Annotated[bool, typer.Option("--drain", help="Exit once the queues are empty.")] = False,
    fill_order: Annotated[
        bool, typer.Option("--fill-order", help="Claim only when every lower-ranked worker is full (leaky bucket).")
    ] = False,
    max_idle: Annotated[
        str | None, typer.Option(metavar="DURATION", help="Exit after being idle this long, e.g. 10m.")
    ] = None,
    metrics_port: Annotated[
        int | None,
        typer.Option(min=1, max=65535, metavar="PORT", help="Serve this worker's Prometheus metrics on this port."),
    ] = None,
    metrics_host: Annotated[
        str, typer.Option(metavar="HOST", help="Address the metrics port binds (with --metrics-port).")
    ] = "127.0.0.1",
    log_level: Annotated[
        str, typer.Option(metavar="LEVEL", help="Log level (debug, info, warning, error) of the worker and your tasks.")
    ] = "info",
    log_tracebacks: Annotated[
        bool,
        typer.Option(
            "--log-tracebacks", help="Log the traceback of each failed attempt (else only at --log-level debug)."
        ),
    ] = False,
    log_format: Annotated[
        str | None,
        typer.Option(
            "--log-format",
            metavar="FORMAT",
            help="text, or json: one JSON object a line with stable fields (env TIDEGATE_LOG_FORMAT).",
            show_default="text",
        ),
    ] = None,
    database: Annotated[
        str | None,
        typer.Option(
            "--database",
            "-d",
            envvar=DATABASE_ENV,
            metavar="URL",
            help=DATABASE_HELP,
            show_default="the app's own database",
        ),
    ] = None,
) -> None:
    """Run a worker for the app's tasks until SIGTERM/SIGINT (or, with --drain, until idle)."""
    configure_logging(log_level, log_tracebacks, chosen_log_format(log_format))
    app = load_app_for(target, database)
    runner = app.worker(
        queues=queue or None, max_workers=max_workers, drain=drain, fill_order=fill_order, max_idle=max_idle
    )
    settings = runner.settings
    if metrics_port is not None:
        _serve_metrics(metrics_port, metrics_host)
    stdout.print(
        Text.assemble(
            ("worker ", "bold"),
            (runner.id, "bold cyan"),
            " started: queues ",
            (", ".join(settings.queues), "bold"),
            f", capacity {settings.max_workers}, database ",
            masked(app.database),
            " (drain)" if drain else "",
        ),
        soft_wrap=True,
    )
    sys.stdout.flush()  # a supervisor reading a pipe sees the line now
    try:
        runner.run()
    finally:
        app.close()
    stopped = Text.assemble(("worker ", "bold"), runner.id, f" stopped after {runner.completed} attempts")
    stdout.print(stopped, soft_wrap=True)


def _serve_metrics(port: int, host: str) -> None:
    try:
        serve_metrics(port, host)
    except OSError as error:
        raise CommandError(f"--metrics-port {port}: cannot listen on {host}:{port} ({error.strerror})") from None
    stdout.print(Text.assemble("metrics on ", (f"http://{host}:{port}/metrics", "bold")), soft_wrap=True)
