"""A worker's listener passes over only the wake-up of its own cycles that claim (issue 16).

A cycle that reports outcomes and claims in the same transaction saw all that its commit
announces, so its own worker need not be woken by it. A cycle that claims nothing (an outcome
written off the loop, a suspect's start, a held-back turn) did not: its worker may have claimed
before it committed and found the slot it frees still taken, so it must wake that worker too.
"""

from __future__ import annotations

import threading

from tests.races import TIMEOUT
from tidegate.domain.model import CycleRequest

from .conftest import LEASE, QUEUE, claim, completed, enqueue_one


def test_a_cycle_that_claims_nothing_wakes_its_own_workers_listener(store, backend):
    enqueue_one(store)
    [held] = claim(store, "w1")
    woken = threading.Event()
    listener = store.listen(woken.set, own="w1")
    try:
        if backend == "postgres":  # the wake-up given when LISTEN starts
            assert woken.wait(TIMEOUT)
            woken.clear()
        store.cycle(CycleRequest("w1", [QUEUE], [held.fence], [completed(held.fence)], 0, LEASE))
        assert woken.wait(TIMEOUT), "an outcome written without a claim did not wake its own worker"
    finally:
        listener.close()
