"""Tasks the benchmarks run; the database comes from $TIDEGATE_DATABASE."""

from __future__ import annotations

import tidegate

app = tidegate.App()


@app.task(queue="bench")
def noop() -> None:
    """The cheapest possible run: measures tidegate, not the task."""
