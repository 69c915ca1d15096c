"""`tidegate queue why` renders the same explanation as `GET /runs/{id}/why`: full workers, the ETA.

On both backends: the worker layer and the ETA come from store reads (the
registry, recent ends) that each adapter answers in its own SQL.
"""

from __future__ import annotations

from typing import Any

from typer.testing import CliRunner

from tidegate import App, Concurrency, Partition
from tidegate.cli.main import app as cli
from tidegate.domain.clock import ShiftedClock
from tidegate.domain.model import CycleRequest, Outcome, OutcomeKind, WorkerRegistration


def invoke(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args), env={"COLUMNS": "250", "NO_COLOR": "1"})


def _lines(database_url: str, run_id: str) -> list[str]:
    result = invoke("queue", "why", run_id, "--database", database_url)
    assert result.exit_code == 0, result.output
    return [" ".join(line.split()) for line in result.stdout.splitlines()]  # the grid pads its titles


def _row(lines: list[str], title: str) -> str:
    return next(line for line in lines if line.startswith(title))


def test_queue_why_names_full_workers_with_the_runs_they_run(app: App, database_url: str) -> None:
    hello = app.task(name="hello")(lambda: None)
    running, waiting = hello.submit().id, hello.submit().id
    app.store.register_worker(WorkerRegistration("w-full", 1, ["default"], False, 60))
    lines = _lines(database_url, running)
    assert "workers serving queue default 0/1 ok" in _row(lines, "Limits:")
    app.store.cycle(CycleRequest("w-full", ["default"], [], [], 1, 60))

    lines = _lines(database_url, waiting)
    assert f"workers serving queue default — 1 of 1 slot held by {running}" in _row(lines, "Blocked by:")
    assert _row(lines, "ETA:").startswith("ETA: unknown: no run of a blocking scope has run yet")


def test_queue_why_gives_an_eta_from_how_long_the_blocking_scopes_runs_take(
    app: App, database_url: str, clock: ShiftedClock
) -> None:
    """The ETA goes by the duration of the partition's runs, not by ends counted over a minute:
    one run of 2 s has ended, so the next slot frees in about a second, not a minute."""
    app.queue("api", concurrency=Concurrency(global_limit=1, partition=Partition(by_args=["customer_id"])))
    sync = app.task(name="sync_customer", queue="api")(lambda customer_id: None)
    first, second, third, fourth = (sync.submit(customer_id=3).id for _ in range(4))
    [claimed] = app.store.cycle(CycleRequest("w1", ["api"], [], [], 10, 60)).claimed
    assert claimed.id == first
    assert _row(_lines(database_url, second), "ETA:").startswith("ETA: unknown")  # not even started

    app.store.cycle(CycleRequest("w1", ["api"], [claimed.fence], [], 0, 60))  # its start is recorded
    clock.advance(2)  # and it runs for 2 s
    done = Outcome(first, claimed.attempt, OutcomeKind.COMPLETED)
    app.store.cycle(CycleRequest("w1", ["api"], [], [done], 10, 60))  # first ends; second takes the partition
    lines = _lines(database_url, third)
    assert f"queue api partition customer_id=3 — 1 of 1 slot held by {second}" in _row(lines, "Blocked by:")
    assert _row(lines, "ETA:").startswith("ETA: about 1s")  # half of a 2 s run, on average, on a slot of 1
    assert _row(_lines(database_url, fourth), "ETA:").startswith("ETA: about 3s")  # third's 2 s more
