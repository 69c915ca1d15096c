"""A user's application, as the plugin's tests write it into a pytester folder (`orders.py`)."""

from __future__ import annotations

import threading
from datetime import timedelta

from tidegate import App, Concurrency, Context, Partition


class Overlap:
    """How many runs were inside a task at once, at most."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.inside = 0
        self.most = 0

    def __enter__(self) -> None:
        with self.lock:
            self.inside += 1
            self.most = max(self.most, self.inside)

    def __exit__(self, *exc: object) -> None:
        with self.lock:
            self.inside -= 1


def make_app(url: str) -> App:
    app = App(url)
    app.queue("emails", concurrency=Concurrency(global_limit=1, partition=Partition(by_args=["customer_id"])))
    app.queue("lane", concurrency=Concurrency(global_limit=1))
    app.state = {"lane": Overlap(), "open": Overlap(), "attempts": 0}  # type: ignore[attr-defined]
    app.tasks_by_name = {task.name: task for task in _orders(app) + _behaviours(app)}  # type: ignore[attr-defined]
    return app


def _orders(app: App) -> list:

    @app.task(name="send_receipt", queue="emails", tags={"kind": "receipt"})
    def send_receipt(order_id: int, customer_id: int = 0) -> dict:
        return {"sent": order_id, "pair": (order_id, customer_id)}

    @app.task(name="place_order", queue="orders")
    def place_order(order_id: int, customer_id: int = 0) -> int:
        send_receipt.options(run_at=timedelta(hours=1)).submit(order_id=order_id, customer_id=customer_id)
        return order_id

    @app.task(name="parent", queue="orders")
    def parent(ctx: Context, order_id: int) -> dict:
        return ctx.trigger_and_wait(send_receipt, order_id=order_id, customer_id=99)

    return [send_receipt, place_order, parent]


def _behaviours(app: App) -> list:
    both_inside = threading.Barrier(2, timeout=10)

    @app.task(name="in_lane", queue="lane")
    def in_lane(n: int) -> None:
        with app.state["lane"]:  # type: ignore[attr-defined]
            threading.Event().wait(0.2)  # long enough for a second run to start, were the limit not held

    @app.task(name="in_open", queue="open")
    def in_open(n: int) -> None:
        with app.state["open"]:  # type: ignore[attr-defined]
            both_inside.wait()  # two runs inside at once, or a BrokenBarrierError

    @app.task(name="forever", queue="loop")
    def forever(n: int) -> None:
        forever.submit(n=n + 1)

    @app.task(name="flaky", queue="flaky", max_attempts=2, retry_backoff="10m")
    def flaky() -> str:
        app.state["attempts"] += 1  # type: ignore[attr-defined]
        if app.state["attempts"] == 1:  # type: ignore[attr-defined]
            raise RuntimeError("first attempt fails")
        return "second"

    @app.task(name="divide")
    def divide(a: int, b: int) -> float:
        return a / b

    @app.task(name="pair")
    async def pair(a: int) -> tuple:
        return (a, a)

    @app.task(name="clock_reading")
    def clock_reading(ctx: Context) -> set:
        return {ctx.run_id}

    return [in_lane, in_open, forever, flaky, divide, pair, clock_reading]


__all__ = ["Overlap", "make_app"]
