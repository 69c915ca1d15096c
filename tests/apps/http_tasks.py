"""The app `tidegate serve` loads in the process tests (the HTTP walk-through's calls, over a socket).

`App()` takes its database from $TIDEGATE_DATABASE, which `serve --database`
and the worker processes set.
"""

from __future__ import annotations

from tidegate import App

app = App()
app.queue("ingest", max_active=2)


@app.task(name="sync_customer")
def sync_customer(customer_id: int) -> dict[str, int]:
    return {"synced": customer_id}


@app.task(name="ingest", queue="ingest")
def ingest() -> None:
    return None
