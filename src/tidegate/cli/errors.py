"""One place that turns expected failures into a single red line.

Every failure tidegate can explain (a `TidegateError`, including the CLI's own
`CommandError`) is printed as `error: ...` on stderr with exit code 1, never
as a traceback: an operator should read what went wrong, not where in our
code it surfaced. Usage errors stay with Typer (exit code 2). Anything else is
a bug, and its traceback is worth having.
"""

from __future__ import annotations

from typing import Any

import typer
from rich.text import Text
from typer.core import TyperGroup

from tidegate.bootstrap import masked
from tidegate.cli.render import stderr
from tidegate.domain.errors import AdmissionRejected, RunCanceled, RunFailed, TidegateError

EX_TEMPFAIL = 75  # sysexits.h: temporary failure, the caller should retry


class CommandError(TidegateError):
    """Input the CLI itself refused (a bad `--arg`, a MODULE:APP that does not import)."""


def first_line(message: str) -> str:
    """The headline of a message: remote errors carry a traceback after it."""
    for line in message.splitlines():
        if line.strip():
            return line.strip()
    return message.strip() or "unknown error"


def report(error: TidegateError) -> None:
    message = masked(first_line(str(error)))  # a password never reaches a terminal, whoever wrote the message
    message = message.encode("utf-8", "backslashreplace").decode("utf-8")  # a lone surrogate, quoted back
    if isinstance(error, RunFailed) and not isinstance(error, RunCanceled):
        message += f" (details: tidegate runs show {error.run_id})"
    stderr.print(Text.assemble(("error: ", "bold red"), (message, "red")), soft_wrap=True)


class ReportingGroup(TyperGroup):
    """The root command group; sub-commands run inside its `invoke`, so one handler sees all."""

    # Typer hands its own Context subclass in; the base class names click's (vendored privately by Typer).
    def invoke(self, ctx: typer.Context) -> Any:  # type: ignore[override]
        try:
            return super().invoke(ctx)
        except AdmissionRejected as error:
            report(error)
            raise typer.Exit(EX_TEMPFAIL) from None  # a temporary failure: retry after the hint
        except TidegateError as error:
            report(error)
            raise typer.Exit(1) from None
