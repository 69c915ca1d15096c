"""The demo's tasks: small stand-ins for typical background work.

`app` reads $TIDEGATE_DATABASE so the demo can point its worker processes
(and itself) at the database it just created; without it, the demo file.
"""

from __future__ import annotations

import asyncio
import os
import random
import time

import tidegate
from tidegate.demo import DEMO_DATABASE

app = tidegate.App(os.environ.get("TIDEGATE_DATABASE") or DEMO_DATABASE)

EMAIL_FIRST_ATTEMPT_FAILURE_RATE = 0.15


@app.task(name="resize_image", queue="images")
def resize_image(image_id: int, width: int = 640) -> dict[str, int]:
    """CPU-ish work in a thread: 10-40 ms."""
    time.sleep(random.uniform(0.010, 0.040))
    return {"image_id": image_id, "width": width, "height": width * 3 // 4}


@app.task(name="send_email", queue="emails", max_attempts=3, retry_backoff="50ms")
def send_email(to: str, subject: str, ctx: tidegate.Context) -> dict[str, object]:
    """A flaky dependency: ~15% of first attempts fail, and the retry succeeds."""
    time.sleep(random.uniform(0.005, 0.020))
    if ctx.attempt == 1 and random.random() < EMAIL_FIRST_ATTEMPT_FAILURE_RATE:
        raise ConnectionError(f"SMTP server hung up while sending to {to} (simulated)")
    return {"to": to, "subject": subject, "attempt": ctx.attempt}


@app.task(name="fetch_quote", queue="quotes")
async def fetch_quote(symbol: str) -> dict[str, object]:
    """I/O on the worker's event loop: 20-80 ms of waiting, no thread held."""
    await asyncio.sleep(random.uniform(0.020, 0.080))
    return {"symbol": symbol, "price": round(random.uniform(10, 500), 2)}
