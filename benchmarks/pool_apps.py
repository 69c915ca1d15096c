"""Set-up shared by the pool benchmarks: a fresh database with pools, and runs to hold steps.

Steps only exist inside a running attempt (every slot write is fenced on the
run id and attempt), so each contending process gets a run claimed for it
here, with a lease long enough for the whole measurement.
"""

from __future__ import annotations

import tidegate
from tidegate.domain.model import CycleRequest

QUEUE = "pool_bench"
RUN_LEASE = 600.0


def prepare(url: str, pools: dict[str, int], runs: int) -> list[tuple[str, int]]:
    """Migrate, configure `pools` ({name: limit}, lease 5m), claim `runs` runs: their fences."""
    app = tidegate.App(url)
    try:

        @app.task(name="pool_bench.holder", queue=QUEUE)
        def holder() -> None:
            """Never executed: its runs only own the steps of the benchmark."""

        for name, limit in pools.items():
            app.set_pool_limit(name, limit, lease_duration="5m")
        holder.submit_many([{}] * runs)
        claimed = app.store.cycle(CycleRequest("pool-bench", [QUEUE], [], [], runs, RUN_LEASE)).claimed
        assert len(claimed) == runs, f"claimed {len(claimed)} of {runs} runs"
        return [run.fence for run in claimed]
    finally:
        app.close()
