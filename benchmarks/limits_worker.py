"""A worker process for the limit benchmarks.

    python benchmarks/limits_worker.py SCENARIO QUEUES MAX_WORKERS [--drain] [--no-wakeups] [--poll-interval 1s]
        [--fill-order]

The database comes from $TIDEGATE_DATABASE. It prints READY on stdout once
serving, and stops on SIGTERM (or when drained, with --drain).

On SIGUSR1 it prints `CYCLES N`: how many store cycles (worker turns that
reached the database) it has made so far, to measure how often it polls.

--no-wakeups replaces the store's listener with one that never calls back,
in this process only (nothing in src/ changes): the worker then finds new
work only by its own poll, its local wake-ups (a slot of its own freed) and
the `next_due_in` hint a claim returns. That is the baseline the wake-up
path is compared with.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from limits_apps import build
from tidegate.app.settings import duration_setting


class SilentListener:
    def close(self) -> None:
        pass


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("scenario")
    parser.add_argument("queues")
    parser.add_argument("max_workers", type=int)
    parser.add_argument("--drain", action="store_true")
    parser.add_argument("--no-wakeups", action="store_true")
    parser.add_argument("--poll-interval")
    parser.add_argument("--fill-order", action="store_true")
    options = parser.parse_args()
    app = build(options.scenario, os.environ["TIDEGATE_DATABASE"])
    store = app.store
    cycles = 0
    cycle = store.cycle

    def counted_cycle(*args: Any) -> Any:
        nonlocal cycles
        cycles += 1
        return cycle(*args)

    # Counted by wrapping the one store's method in place: the worker and its maintenance share it.
    store.cycle = counted_cycle  # type: ignore[method-assign, assignment]
    signal.signal(signal.SIGUSR1, lambda *_: print(f"CYCLES {cycles}", flush=True))
    if options.no_wakeups:

        def silent(callback: Callable[[], None], own: str | None = None) -> SilentListener:
            return SilentListener()

        store.listen = silent  # type: ignore[method-assign]  # the baseline without wake-ups
    worker = app.worker(
        queues=options.queues.split(","),
        max_workers=options.max_workers,
        drain=options.drain,
        fill_order=options.fill_order,
        poll_interval=options.poll_interval or duration_setting("TIDEGATE_POLL_INTERVAL"),
    )
    # Worker's on_ready hook (its constructor argument; App.worker does not pass one on).
    worker._on_ready = lambda: print("READY", flush=True)
    worker.run()


if __name__ == "__main__":
    main()
