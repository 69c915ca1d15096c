"""The app `tidegate serve` loads for benchmarks/http_submit.py; the database comes from $TIDEGATE_DATABASE."""

from __future__ import annotations

import tidegate

CEILING = 200  # the flood queue's admission ceiling (max_active)

app = tidegate.App()
app.queue("http")
app.queue("flood", max_active=CEILING)


@app.task(name="http_noop", queue="http")
def http_noop() -> None:
    """Submitted, never run: the benchmark measures the submit path only."""


@app.task(name="flood_noop", queue="flood")
def flood_noop() -> None:
    """Fills the flood queue to its ceiling; every later submit is a 429."""
