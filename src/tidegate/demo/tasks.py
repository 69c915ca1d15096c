"""The demo's tasks: small stand-ins for typical background work, under real limits.

`app` reads $TIDEGATE_DATABASE so the demo can point its worker processes
(and itself) at the database it just created; without it, the demo file.

The limits are the point of the demo, and each one binds at some moment:
- at most `MAX_CONCURRENT_RUNS` runs at once across all workers (fewer than
  the workers could take);
- `sync_customer` calls a rate-limited external API: at most 2 calls per
  customer at a time, 4 for the big customer on a higher tier;
- tenants' work (`resize_image`, `send_email`, tagged `tenant=...`) is capped
  per tenant, so the busiest tenant cannot starve the others;
- `nightly_report` is a workflow: its `heavy_query` steps fan out over days,
  at most `REPORT_WINDOW` per run in flight, and every run's queries share the
  `warehouse_db` pool of `WAREHOUSE_DB_LIMIT` slots (set by the demo before
  its workers start).
"""

from __future__ import annotations

import asyncio
import os
import random
import time

import tidegate
from tidegate import Concurrency, Partition, RunQueueConfig, TagConcurrencyLimit
from tidegate.demo import DEMO_DATABASE

MAX_CONCURRENT_RUNS = 12
TENANT_LIMIT = 2
API_LIMIT_PER_CUSTOMER = 2
BIG_CUSTOMER = 1
BIG_CUSTOMER_LIMIT = 4
WAREHOUSE_DB = "warehouse_db"
WAREHOUSE_DB_LIMIT = 3
REPORT_WINDOW = 2

app = tidegate.App(
    os.environ.get("TIDEGATE_DATABASE") or DEMO_DATABASE,
    run_queue=RunQueueConfig(
        max_concurrent_runs=MAX_CONCURRENT_RUNS,
        tag_concurrency_limits=[TagConcurrencyLimit(key="tenant", per_unique_value=True, limit=TENANT_LIMIT)],
    ),
)

app.queue(
    "external_api",
    concurrency=Concurrency(
        global_limit=API_LIMIT_PER_CUSTOMER,
        partition=Partition(by_args=["customer_id"]),
        overrides={f"customer_id={BIG_CUSTOMER}": BIG_CUSTOMER_LIMIT},
    ),
)

EMAIL_FIRST_ATTEMPT_FAILURE_RATE = 0.15


@app.task(name="sync_customer", queue="external_api")
def sync_customer(customer_id: int) -> dict[str, object]:
    """A call to a partner API that allows only a few concurrent requests per customer: 250-500 ms."""
    time.sleep(random.uniform(0.250, 0.500))
    return {"customer_id": customer_id, "synced": random.randint(1, 50)}


@app.task(name="resize_image", queue="images")
def resize_image(image_id: int, width: int = 640) -> dict[str, int]:
    """CPU-ish work in a thread: 100-300 ms."""
    time.sleep(random.uniform(0.100, 0.300))
    return {"image_id": image_id, "width": width, "height": width * 3 // 4}


@app.task(name="send_email", queue="emails", max_attempts=3, retry_backoff="50ms")
def send_email(to: str, subject: str, ctx: tidegate.Context) -> dict[str, object]:
    """A flaky dependency: ~15% of first attempts fail, and the retry succeeds."""
    time.sleep(random.uniform(0.050, 0.150))
    if ctx.attempt == 1 and random.random() < EMAIL_FIRST_ATTEMPT_FAILURE_RATE:
        raise ConnectionError(f"SMTP server hung up while sending to {to} (simulated)")
    return {"to": to, "subject": subject, "attempt": ctx.attempt}


@app.task(name="fetch_quote", queue="quotes")
async def fetch_quote(symbol: str) -> dict[str, object]:
    """I/O on the worker's event loop: 100-300 ms of waiting, no thread held."""
    await asyncio.sleep(random.uniform(0.100, 0.300))
    return {"symbol": symbol, "price": round(random.uniform(10, 500), 2)}


@app.step(pool=WAREHOUSE_DB)
async def heavy_query(day: str) -> int:
    """A heavy query on a shared database that takes only a few at a time: 100-250 ms."""
    await asyncio.sleep(random.uniform(0.100, 0.250))
    return random.randint(1_000, 9_999)


@app.step
async def publish(counts: list[int]) -> int:
    """Runs once every day's query is done, with their outputs in order."""
    return sum(counts)


@app.workflow(
    name="nightly_report",
    queue="reports",
    executor=tidegate.Executor.parallel(max_workers=1, max_async_concurrent=REPORT_WINDOW),
)
def nightly_report(wf: tidegate.Workflow, days: list[str]) -> tidegate.StepRef:
    """A workflow: one query per day through the shared pool, then publish the total."""
    counts = wf.map(heavy_query, days, concurrency=REPORT_WINDOW)
    return wf.step(publish, counts)
