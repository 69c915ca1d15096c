from tidegate.domain.model import CycleRequest

"""A rescued or handed-back run keeps its place in the queue: priority, then its original queue time.

Claims order by priority, then `scheduled_at`; a rescue or a hand-back that
re-stamped it with now() sent the run behind every younger run of its
priority (with a backlog, a killed run waited tens of seconds to run again).
Retries after a failure are another path: they keep their backoff.
"""

QUEUE = "placed"


def _claim(store, worker, limit=1, lease=30.0):
    return store.cycle(CycleRequest(worker, [QUEUE], [], [], limit, lease)).claimed


def test_a_rescued_run_is_claimed_before_younger_runs_of_its_priority(app, clock):
    @app.task(name="t.placed", queue=QUEUE, max_attempts=3)
    def placed(n: int) -> int:
        return n

    store = app.store
    first = placed.submit(n=0)
    [run] = _claim(store, "dead-worker", lease=0.3)
    assert run.id == first.id
    clock.advance(0.05)  # so that the younger runs are queued strictly later
    younger = placed.submit_many([{"n": i} for i in range(1, 4)])
    scheduled = first.info().scheduled_at
    clock.advance(0.3)
    report = store.sweep("sweeper", 0.05)
    assert report is not None and report.requeued == [first.id]
    assert first.info().scheduled_at == scheduled  # its place is kept, not moved to the rescue's now()
    [again] = _claim(store, "live-worker")
    assert again.id == first.id, f"a younger run went first: {again.id} (younger: {[h.id for h in younger]})"


def test_a_handed_back_run_is_claimed_before_younger_runs_of_its_priority(app, clock):
    @app.task(name="t.placed_back", queue=QUEUE, max_attempts=3)
    def placed_back(n: int) -> int:
        return n

    store = app.store
    first = placed_back.submit(n=0)
    [run] = _claim(store, "leaving-worker")
    clock.advance(0.05)
    placed_back.submit_many([{"n": i} for i in range(1, 4)])
    scheduled = first.info().scheduled_at
    assert store.hand_back("leaving-worker", [run.fence]) == [first.id]
    assert first.info().scheduled_at == scheduled
    [requeued] = [e for e in store.run_events(first.id) if e.type == "RunRequeued"]
    assert requeued.metadata["charged"] is False  # a hand-back never counts
    [again] = _claim(store, "next-worker")
    assert again.id == first.id
