"""Claim order: priority first (higher first), then age; across all of a worker's queues."""

from tidegate import RunStatus
from tidegate.domain.model import CycleRequest


def test_runs_are_claimed_by_priority_then_age_across_queues(app, clock):
    @app.task(name="t.a", queue="qa")
    def a(n: int) -> int:
        return n

    @app.task(name="t.b", queue="qb")
    def b(n: int) -> int:
        return n

    @app.task(name="t.c", queue="qc")
    def c(n: int) -> int:
        return n

    submitted = []
    for n, (task, priority) in enumerate([(a, 0), (b, 0), (a, 5), (b, 5), (a, -1), (b, 9), (c, 100)]):
        submitted.append((task.options(priority=priority).submit(n=n), priority))
        clock.advance(0.002)  # distinct queued times
    store = app.store
    order = []
    while True:
        claimed = store.cycle(CycleRequest("worker-1", ["qa", "qb"], [], [], 1, 30)).claimed
        if not claimed:
            break
        order.append(claimed[0].args["n"])
    assert order == [5, 2, 3, 0, 1, 4]
    # qc was not among the worker's queues: untouched
    assert submitted[-1][0].status() is RunStatus.QUEUED


def test_a_batch_claim_takes_the_best_runs_in_order(app):
    @app.task(name="t.batch", queue="qa")
    def batch(n: int) -> int:
        return n

    @app.task(name="t.batch2", queue="qb")
    def batch2(n: int) -> int:
        return n

    for n in range(6):
        (batch if n % 2 else batch2).options(priority=n).submit(n=n)
    claimed = app.store.cycle(CycleRequest("worker-1", ["qa", "qb"], [], [], 3, 30)).claimed
    assert [run.args["n"] for run in claimed] == [5, 4, 3]
    assert all(run.attempt == 1 for run in claimed)
