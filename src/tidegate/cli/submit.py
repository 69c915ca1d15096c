"""`tidegate submit`: store a run by task name, optionally wait for its result.

Submitting by name needs no task code here: the task's defaults come from
the store, where any app that defines the task registered them.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Annotated, Any

import typer

from tidegate.app import App, RunHandle
from tidegate.bootstrap import DEFAULT_DATABASE
from tidegate.cli.connect import check_exists
from tidegate.cli.errors import CommandError
from tidegate.cli.options import Database
from tidegate.cli.parsing import parse_args, parse_tags
from tidegate.cli.render import pretty_json, stderr
from tidegate.domain.durations import parse_duration
from tidegate.domain.errors import WaitTimeout

_WAIT_SLICE = 0.25  # how often the spinner re-reads the status while waiting


def submit(
    task: Annotated[str, typer.Argument(metavar="TASK", help="Task name, as registered by its app.")],
    arg: Annotated[
        list[str] | None,
        typer.Option("--arg", "-a", metavar="NAME=VALUE", help="One argument; VALUE is JSON if it parses, else text."),
    ] = None,
    args: Annotated[
        str | None, typer.Option("--args", metavar="JSON", help="All arguments as a JSON object (--arg wins).")
    ] = None,
    queue: Annotated[
        str | None, typer.Option("--queue", "-q", metavar="QUEUE", help="Queue (default: the task's).")
    ] = None,
    priority: Annotated[int | None, typer.Option(help="Higher runs first (default: the task's).")] = None,
    tag: Annotated[
        list[str] | None, typer.Option("--tag", metavar="KEY=VALUE", help="A tag, added to the task's.")
    ] = None,
    delay: Annotated[
        str | None, typer.Option(metavar="DURATION", help="Run no sooner than this from now, e.g. 30s.")
    ] = None,
    concurrency_key: Annotated[
        str | None, typer.Option(metavar="KEY", help="Partition key for concurrency limits.")
    ] = None,
    unique_key: Annotated[
        str | None,
        typer.Option(metavar="KEY", help="The key of the task's Unique rule: a run holding it is printed instead."),
    ] = None,
    idempotency_key: Annotated[
        str | None,
        typer.Option(metavar="KEY", help="Every submit with KEY gets the run the first made (for --idempotency-ttl)."),
    ] = None,
    idempotency_ttl: Annotated[
        str | None,
        typer.Option(metavar="DURATION", help="How long --idempotency-key is kept, e.g. 24h (default a day)."),
    ] = None,
    rate_cost: Annotated[
        int | None,
        typer.Option(metavar="N", help="What the run takes of its queue's rate (default: the task's rate_cost)."),
    ] = None,
    wait: Annotated[bool, typer.Option("--wait", "-w", help="Wait for the run and print its result as JSON.")] = False,
    timeout: Annotated[
        str | None, typer.Option(metavar="DURATION", help="With --wait: give up after this long (the run goes on).")
    ] = None,
    database: Database = DEFAULT_DATABASE,
) -> None:
    """Submit a run of TASK and print its id (or, when a run holds its unique or idempotency key, that run's id,
    saying on stderr that it is a duplicate)."""
    run_args = parse_args(args, arg or [])
    tags = parse_tags(tag or [])
    run_at = None if delay is None else timedelta(seconds=parse_duration(delay, name="--delay"))
    if timeout is not None and not wait:
        raise CommandError("--timeout only applies with --wait")
    limit = None if timeout is None else parse_duration(timeout, name="--timeout")
    check_exists(database)  # a fresh file cannot know the task: say "wrong path", not "unknown task"
    with App(database) as app:
        handle = app.submit(
            task,
            run_args,
            priority=priority,
            tags=tags or None,
            queue=queue,
            run_at=run_at,
            concurrency_key=concurrency_key,
            unique_key=unique_key,
            idempotency_key=idempotency_key,
            idempotency_ttl=idempotency_ttl,
            rate_cost=rate_cost,
        )
        typer.echo(handle.id)
        if handle.duplicate:
            stderr.print(f"duplicate: run {handle.id} already holds this key; nothing was stored", highlight=False)
        if wait:
            typer.echo(pretty_json(_wait(handle, limit)))


def _wait(handle: RunHandle, timeout: float | None) -> Any:
    """`RunHandle.wait` in slices, so the spinner can show the run's current status."""
    deadline = None if timeout is None else time.monotonic() + timeout
    with stderr.status(f"waiting for run {handle.id}…") as spinner:
        while True:
            remaining = None if deadline is None else deadline - time.monotonic()
            try:
                slice_ = _WAIT_SLICE if remaining is None else max(0.0, min(_WAIT_SLICE, remaining))
                return handle.wait(timeout=slice_)
            except WaitTimeout:
                if remaining is not None and remaining <= _WAIT_SLICE:
                    raise WaitTimeout(
                        f"run {handle.id} is still {handle.status().value} after {timeout:g}s (it goes on)"
                    ) from None
                spinner.update(f"waiting for run {handle.id} ({handle.status().value})…")
