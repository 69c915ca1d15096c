"""`tidegate demo`: the showcase, a thin door onto `tidegate.demo.runner`.

The demo uses its own fresh database (`.tidegate/demo.db`), never
$TIDEGATE_DATABASE: a curious first command must not fill, or wipe, a real one.
"""

from __future__ import annotations

from typing import Annotated

import typer

from tidegate.demo.runner import DemoPlan, run_demo


def demo(
    runs: Annotated[int, typer.Option(min=1, max=100_000, help="How many runs to submit.")] = 300,
    workers: Annotated[int, typer.Option(min=1, max=32, help="Worker processes to start.")] = 2,
    max_workers: Annotated[int, typer.Option(min=1, max=256, help="Capacity of each worker.")] = 8,
    database: Annotated[
        str | None,
        typer.Option(
            "--database",
            "-d",
            metavar="URL",
            help="An empty database to use instead (e.g. postgresql://...).",
            show_default="a fresh .tidegate/demo.db",
        ),
    ] = None,
) -> None:
    """Run the demo: worker processes drain a burst of mixed runs under limits, then a summary."""
    ok = run_demo(DemoPlan(runs=runs, workers=workers, max_workers=max_workers, database=database))
    raise typer.Exit(0 if ok else 1)
