"""A process that takes pool slots in a loop through a PoolGuard and logs when it held them.

Usage: python -m tests.apps.pool_contender URL RUN_ID ATTEMPT WORKER OUT ITERATIONS OFFSET

Each iteration asks for one set of pools (all or none), holds it a few
milliseconds and releases it; the line `STEPKEY START END` (monotonic
seconds, system-wide on Linux) is appended to OUT for the test to check.
The step key names the pools asked for (`a-b.17`), so a snapshot of the
holder table shows whether a step ever held only part of them.
"""

from __future__ import annotations

import random
import sys
import time

from tests.support.pool_guard import holding
from tidegate.bootstrap import open_store
from tidegate.domain.pools import pool_needs
from tidegate.engine.runtime.pools import ClaimPolicy, PoolGuard

REQUESTS = [{"a": 1, "b": 1}, {"b": 1, "c": 1}, {"a": 1, "c": 1}, {"c": 2}, {"a": 1, "b": 1, "c": 1}]
POLICY = ClaimPolicy(timeout=60, poll_interval=0.2, poll_jitter=0.1)


def main(argv: list[str]) -> int:
    url, run_id, attempt, worker, out, iterations, offset = argv
    store = open_store(url, migrate=False)
    guard = PoolGuard(store, POLICY)
    fence = (run_id, int(attempt))
    try:
        with open(out, "a", buffering=1) as log:
            for index in range(int(iterations)):
                wanted = REQUESTS[(index + int(offset)) % len(REQUESTS)]
                key = f"{'-'.join(sorted(wanted))}.{index}"
                with holding(guard, fence, worker, key, pool_needs(wanted)):
                    start = time.monotonic()
                    time.sleep(random.uniform(0, 0.003))
                    end = time.monotonic()
                log.write(f"{key} {start:.6f} {end:.6f}\n")
    finally:
        guard.close()
        store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
