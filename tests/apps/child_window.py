"""A workflow whose `wf.map_children` window slides past a long child (issue 13, item 7).

`tests.apps.child_window:app` is what the worker processes of
`tests/process/test_child_window_processes.py` run. Item 0's child holds until
the gate file exists; every other item's child takes `seconds`. Each child
execution logs `start|end item <n> <t>` to the log file it is given
(`tests.apps.steplog`), so a test sees which items ran, how often each one
completed, and how many ran at once.
"""

from __future__ import annotations

import os
import time

import tidegate
from tests.apps.steplog import log_line
from tidegate import Executor, Workflow

GATE_LIMIT = 120.0  # seconds a gated child waits for its gate at most: a test never hangs on it


def hold_until(gate: str) -> None:
    deadline = time.monotonic() + GATE_LIMIT
    while not os.path.exists(gate) and time.monotonic() < deadline:
        time.sleep(0.01)


def make_app(database: str | None = None) -> tidegate.App:
    app = tidegate.App(database)
    app.queue("loads")

    @app.task(name="window.item", queue="loads", max_attempts=5, retry_backoff="50ms")
    def item(n: int, log: str, gate: str, seconds: float) -> int:
        log_line(log, "start", "item", n)
        if n == 0:
            hold_until(gate)
        else:
            time.sleep(seconds)
        log_line(log, "end", "item", n)
        return n * 10

    @app.workflow(name="window.flow", queue="etl", executor=Executor.in_process())
    def flow(wf: Workflow, items: int, concurrency: int, log: str, gate: str, seconds: float):
        return wf.map_children(item, list(range(items)), concurrency=concurrency, log=log, gate=gate, seconds=seconds)

    return app


app = make_app()
