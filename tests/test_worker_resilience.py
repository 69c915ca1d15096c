"""A worker survives a transient store error in one of its turns (a dropped connection, a restart)."""

import threading

from tidegate import RunStatus, StoreUnavailable

from .conftest import wait_until


def test_a_transient_store_error_in_a_turn_does_not_stop_the_worker(app, start_worker, monkeypatch):
    @app.task(name="t.after_glitch")
    def after_glitch(n: int) -> int:
        return n

    store = app.store
    real_cycle = store.cycle
    lock = threading.Lock()
    calls = {"n": 0, "failed": 0}

    def glitchy_cycle(*args, **kwargs):
        with lock:
            calls["n"] += 1
            fail = calls["n"] in (3, 4)
            if fail:
                calls["failed"] += 1
        if fail:
            raise StoreUnavailable("connection reset by peer (injected)")
        return real_cycle(*args, **kwargs)

    monkeypatch.setattr(store, "cycle", glitchy_cycle)
    worker = start_worker(max_workers=2)
    handles = after_glitch.submit_many([{"n": i} for i in range(10)])
    wait_until(lambda: calls["failed"] == 2, 30, message="the injected store errors")
    results = [handle.wait(timeout=20) for handle in handles]
    assert results == list(range(10))
    assert worker._error is None
    assert not worker.join(0.1), "the worker stopped after a transient store error"
    assert app.store.status_counts()[RunStatus.COMPLETED] == 10
