"""Fill order (leaky bucket): load concentrates on the lowest-ranked worker; surplus workers idle and may exit.

Workers with `fill_order=True` claim only when every lower-ranked worker
sharing a queue is full. A trickle is served by rank 0 alone; a burst fills
every worker; a worker idle for `max_idle` exits by itself and deregisters.
"""

from __future__ import annotations

import threading
import time

import pytest

from tidegate import RunStatus

from .conftest import execute_sql, wait_until

QUEUE = "fill"


def _declare(app, gate: threading.Event | None = None):
    @app.task(name="fill.quick", queue=QUEUE)
    def quick(n: int) -> int:
        return n

    @app.task(name="fill.held", queue=QUEUE)
    def held(n: int) -> int:
        assert gate is not None
        gate.wait(60)
        return n

    return quick, held


def _start_ranked(start_worker, app, count, options=None):
    """Start workers one after the other so their ranks are 0, 1, 2... in start order."""
    workers = []
    for index in range(count):
        extra = (options or {}).get(index, {})
        worker = start_worker(app, max_workers=1, fill_order=True, queues=[QUEUE], **extra)
        workers.append(worker)
    assert [worker.rank for worker in workers] == list(range(count))
    return workers


def test_a_trickle_is_served_by_the_lowest_rank_and_a_burst_by_all(app, start_worker):
    gate = threading.Event()
    quick, held = _declare(app, gate)
    workers = _start_ranked(start_worker, app, 3)

    trickle = 20
    for n in range(trickle):
        assert quick.submit(n=n).wait(timeout=30) == n
        time.sleep(0.02)
    done = [worker.completed for worker in workers]
    assert sum(done) == trickle
    assert done[0] >= 0.9 * trickle, f"runs per rank: {done}"

    # a burst of slow runs: rank 0 fills, then rank 1 may claim, then rank 2
    before = [worker.completed for worker in workers]
    handles = held.submit_many([{"n": n} for n in range(6)])
    wait_until(
        lambda: all(worker.in_flight == 1 for worker in workers), 30, message="every worker to hold a run of the burst"
    )
    assert app.store.status_counts()[RunStatus.RUNNING] == 3
    gate.set()
    assert [handle.wait(timeout=30) for handle in handles] == list(range(6))
    assert all(worker.completed > count for worker, count in zip(workers, before, strict=True))


def test_an_idle_worker_with_max_idle_exits_while_the_lowest_rank_keeps_working(
    app, start_worker, database_url, caplog
):
    quick, _ = _declare(app)
    lowest, middle, idle = _start_ranked(start_worker, app, 3, {1: {"max_idle": "1s"}, 2: {"max_idle": "1s"}})

    stop = threading.Event()
    served = []
    failures: list[BaseException] = []

    def trickle():
        n = 0
        try:
            while not stop.is_set():
                served.append(quick.submit(n=n).wait(timeout=30))
                n += 1
                time.sleep(0.05)
        except BaseException as error:
            failures.append(error)

    feeder = threading.Thread(target=trickle)
    feeder.start()
    try:
        assert idle.join(30), "an idle worker with max_idle=1s did not exit"
        assert middle.join(30), "an idle worker with max_idle=1s did not exit"
        assert "worker stopped on an error" not in caplog.text  # they left for max_idle
        count = len(served)
        wait_until(lambda: len(served) >= count + 5, 30, message="the lowest rank to keep serving the trickle")
    finally:
        stop.set()
        feeder.join(60)
    assert not failures, failures
    assert not lowest.join(0), "the lowest-ranked worker (no max_idle) stopped"
    assert lowest.completed == len(served) and middle.completed == 0 and idle.completed == 0
    # the leavers removed themselves from the registry; the lowest rank is still there
    registered = {row[0] for row in execute_sql(database_url, "SELECT id FROM tidegate_workers")}
    assert registered == {lowest.id}


def test_a_worker_that_is_not_full_never_waits_on_a_higher_rank(app, start_worker):
    """Only *lower* ranks hold a worker back: rank 0 claims while rank 1 is idle, rank 1 stays idle."""
    gate = threading.Event()
    _, held = _declare(app, gate)
    lowest = start_worker(app, max_workers=2, fill_order=True, queues=[QUEUE])
    higher = start_worker(app, max_workers=2, fill_order=True, queues=[QUEUE])
    assert (lowest.rank, higher.rank) == (0, 1)
    handles = held.submit_many([{"n": 0}, {"n": 1}])
    wait_until(lambda: lowest.in_flight == 2, 30, message="rank 0 to take both runs")
    assert higher.in_flight == 0
    gate.set()
    for handle in handles:
        handle.wait(timeout=30)


def test_fill_order_does_not_strand_a_queue_only_a_higher_rank_serves(app, start_worker):
    """A lower-ranked worker that cannot serve queue `a` must not hold back the only worker that can.

    rank 0 serves {b} only and is idle; rank 1 serves {a, b}. A run of `a`
    has a free worker able to run it, so it must run: the fill order is judged per queue.
    """

    @app.task(name="fill.a", queue="a")
    def on_a() -> str:
        return "a"

    @app.task(name="fill.b", queue="b")
    def on_b() -> str:
        return "b"

    only_b = start_worker(app, max_workers=1, fill_order=True, queues=["b"])
    both = start_worker(app, max_workers=1, fill_order=True, queues=["a", "b"])
    assert (only_b.rank, both.rank) == (0, 1)
    assert on_a.submit().wait(timeout=10) == "a"


@pytest.mark.parametrize("fill_order", [False, True])
def test_ranks_are_the_lowest_free_and_reused_after_a_worker_leaves(app, start_worker, fill_order):
    _declare(app)
    first = start_worker(app, max_workers=1, fill_order=fill_order, queues=[QUEUE])
    second = start_worker(app, max_workers=1, fill_order=fill_order, queues=[QUEUE])
    assert (first.rank, second.rank) == (0, 1)
    first.stop(timeout=30, grace=0)
    assert first.join(30)
    third = start_worker(app, max_workers=1, fill_order=fill_order, queues=[QUEUE])
    assert third.rank == 0
    assert second.rank == 1
