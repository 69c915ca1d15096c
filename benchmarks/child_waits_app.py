"""The app of `child_waits.py`: parents batch-waiting on children of 20 ms, under max_concurrent_runs=10.

`python benchmarks/child_waits_app.py QUEUES MAX_WORKERS` runs a worker process that drains
QUEUES (comma-separated) and exits. The database comes from $TIDEGATE_DATABASE.
"""

from __future__ import annotations

import sys
import time

import tidegate

CAP = 10
CHILD_SECONDS = 0.02
CHILDREN = 5

app = tidegate.App(run_queue=tidegate.RunQueueConfig(max_concurrent_runs=CAP))
app.queue("parents")
app.queue("children")


@app.task(name="bench.child", queue="children")
def child(n: int) -> int:
    time.sleep(CHILD_SECONDS)
    return n


@app.task(name="bench.parent", queue="parents")
def parent(ctx: tidegate.Context, n: int) -> int:
    return sum(ctx.batch_trigger_and_wait(child, [{"n": n * CHILDREN + i} for i in range(CHILDREN)]))


if __name__ == "__main__":
    app.worker(queues=sys.argv[1].split(","), max_workers=int(sys.argv[2]), drain=True).run()
