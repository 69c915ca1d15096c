"""`tidegate serve [MODULE:APP]`: the HTTP API on uvicorn.

Without MODULE:APP the server knows tasks by what their workers registered in
the store; with it, the module's declarations (queues, limits, ceilings) are
in force and args are checked against the tasks' signatures too. It binds to
loopback by default and refuses a wider bind unless a token is set. A
connection must send each request's headers within TIDEGATE_HEADER_TIMEOUT
(`api/header_deadline.py`): a slow client is closed, not waited on. The port
is bound before anything is printed, so a busy port is one error line, never
a banner followed by uvicorn's own failure. Every line the running server
writes goes through cli/logs.py: uvicorn's configuration of logging is off
(`log_config=None`) and its loggers reach the one handler there, its access
line is replaced by tidegate's (api/access_log.py, with a duration), and the
banner is a log line too; so `--log-format json` gives one object a line.
"""

from __future__ import annotations

import logging
import socket
from typing import Annotated

import typer

from tidegate.app import settings
from tidegate.bootstrap import DATABASE_ENV, masked
from tidegate.cli.errors import CommandError
from tidegate.cli.loading import load_app_for
from tidegate.cli.logs import configure_logging
from tidegate.cli.options import DATABASE_HELP

# Seconds a stopping server lets requests finish: an event stream never does, so past this it is cut
# (its client reconnects elsewhere with Last-Event-ID) instead of holding the shutdown forever.
SHUTDOWN_GRACE = 5


def serve(
    target: Annotated[
        str | None,
        typer.Argument(metavar="[MODULE:APP]", help="Your tidegate.App, for its queue and limit declarations."),
    ] = None,
    host: Annotated[str, typer.Option(metavar="HOST", help="Address to bind; beyond loopback a token is required.")] = (
        "127.0.0.1"
    ),
    port: Annotated[int, typer.Option(min=1, max=65535, metavar="PORT", help="Port to listen on.")] = 8000,
    database: Annotated[
        str | None,
        typer.Option("--database", "-d", envvar=DATABASE_ENV, metavar="URL", help=DATABASE_HELP),
    ] = None,
    log_level: Annotated[
        str, typer.Option(metavar="LEVEL", help="Log level (debug, info, warning, error) of the server.")
    ] = "info",
    log_format: Annotated[
        str | None,
        typer.Option(
            "--log-format",
            metavar="FORMAT",
            help="text, or json: one JSON object a line with stable fields (env TIDEGATE_LOG_FORMAT).",
            show_default="text",
        ),
    ] = None,
) -> None:
    """Serve the HTTP API (OpenAPI at /api/v1/openapi.json, docs at /api/docs) and the dashboard at /."""
    try:
        import uvicorn

        from tidegate.api import Tokens, check_bind, create_api
        from tidegate.api.header_deadline import header_deadline_protocol
    except ImportError as error:
        raise CommandError(f"the HTTP service needs its extra: pip install 'tidegate[service]' ({error})") from None
    settings.check_environment()
    configure_logging(log_level, log_format=settings.log_format(log_format))
    tokens = Tokens.from_environment()
    check_bind(host, tokens)
    protocol = header_deadline_protocol(settings.duration_setting("TIDEGATE_HEADER_TIMEOUT"))
    with _listening(host, port) as listener:
        app = load_app_for(target, database)
        api = create_api(app, tokens=tokens, owns_app=True, access_log=True)  # its shutdown closes the store
        logging.getLogger("tidegate.serve").info(
            "tidegate API and dashboard on http://%s:%d/ (database %s)", host, port, masked(app.database)
        )
        config = uvicorn.Config(
            api, host=host, port=port, server_header=False,
            log_config=None, log_level=None, access_log=False,  # its loggers take the root's handler and level
            timeout_graceful_shutdown=SHUTDOWN_GRACE,
            http=protocol,  # uvicorn's HTTP/1.1 with a deadline on each request's headers (TIDEGATE_HEADER_TIMEOUT)
        )  # fmt: skip
        uvicorn.Server(config).run(sockets=[listener])


def _listening(host: str, port: int) -> socket.socket:
    """A socket bound to HOST:PORT (uvicorn listens on it), or one CommandError naming why not."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET  # as uvicorn binds a host itself
    listener = socket.socket(family, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a restart need not wait out TIME_WAIT
    try:
        listener.bind((host, port))
    except OSError as error:
        listener.close()
        raise CommandError(f"cannot listen on {host}:{port}: {error.strerror or error}") from None
    return listener
