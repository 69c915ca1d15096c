"""A draining worker's turns: runs that end at once are reported with the next claim (issue 16).

After a full batch the loop turns again at once. Before, that turn came before the attempts it
had just started could run, so it found nothing to report and no free slot, and a worker that
had been woken from outside (or had just started) read the store for cancels alone: in a
5,000-run PostgreSQL drain, a third of all store cycles. Now the attempts run first and the
turn reports them with its claim; and where no limit applies, a turn that reports ended runs
claims as many more ahead of its free slots (worker/loop.py `_room`). Both adapters.
"""

from __future__ import annotations

from typing import Any

from tidegate.domain.model import CycleRequest

QUEUE = "turns"


def test_runs_that_end_at_once_go_with_the_next_claim_and_no_turn_reads_alone(app: Any) -> None:
    @app.task(name="turns.noop", queue=QUEUE)
    async def noop(i: int) -> None:
        return None

    noop.submit_many([{"i": i} for i in range(6)])
    store = app.store
    real_cycle = store.cycle
    turns: list[tuple[int, int, int]] = []  # (starts, outcomes, claim limit) of each store cycle

    def cycle(request: CycleRequest) -> Any:
        turns.append((len(request.starts), len(request.outcomes), request.claim_limit))
        return real_cycle(request)

    store.cycle = cycle
    # A worker starts as if woken from outside (it looks for cancels at its first turns).
    app.worker(queues=[QUEUE], max_workers=2, drain=True).run()
    assert (0, 0, 0) not in turns, turns  # no turn that only read the store
    # From the second turn on, the runs that ended let it claim as many more ahead of its free
    # slots (no limit applies): they run while the next cycle is in flight.
    assert turns == [(0, 0, 2), (2, 2, 4), (4, 4, 6)], turns
