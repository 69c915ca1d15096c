"""429 + Retry-After: the admission ceiling over HTTP.

Three workers of capacity 1 serve a queue whose ceiling (`max_active`) is 15:
3 runs hold the workers and 12 wait, so the 16th POST is refused with 429,
a Retry-After of whole seconds (>= 1) that is the store's computed hint, the
same value in the body, and nothing stored. Before any run ended the hint goes
by the runs in flight (how long they have run), never a fixed fallback. Once
runs complete, a retry is accepted, and the hint then follows their durations.
"""

from __future__ import annotations

import math
import threading

from tests.apps.api import local_client, store_size
from tests.conftest import wait_status, wait_until
from tidegate import App, RunStatus
from tidegate.api.refusals import STALENESS, Refusals
from tidegate.domain.backpressure import Pace, retry_after

CEILING = 15
WORKERS = 3
IN_FLIGHT = 10.0  # seconds the first runs are made to have run before the refusal


def test_the_sixteenth_submit_gets_429_and_a_retry_is_accepted_once_runs_complete(
    app: App, database_url: str, start_worker, clock
) -> None:
    gate = threading.Event()
    app.queue("ingest", max_active=CEILING)

    @app.task(name="ingest", queue="ingest")
    def ingest(n: int) -> int:
        gate.wait(60)
        return n

    now = [0.0]
    api = app.asgi()
    api.state.refusals = Refusals(clock=lambda: now[0])  # the repeat of a refusal expires when the test says
    client = local_client(api)
    try:
        for _ in range(WORKERS):
            start_worker(max_workers=1, queues=["ingest"])
        for n in range(CEILING):
            assert client.post("/api/v1/runs", json={"task": "ingest", "args": {"n": n}}).status_code == 201
        wait_until(lambda: app.store.status_counts()[RunStatus.RUNNING] == WORKERS, message="3 runs running")
        wait_until(lambda: app.store.run_pace(60, queue="ingest").running == WORKERS, message="their starts recorded")
        clock.advance(IN_FLIGHT)  # the three have run that long: no run takes less

        before = store_size(database_url)
        refused = client.post("/api/v1/runs", json={"task": "ingest", "args": {"n": 99}})
        assert refused.status_code == 429, refused.text
        hint = int(refused.headers["Retry-After"])
        assert hint >= 1 and refused.json()["retry_after"] == hint
        assert refused.json()["error"] == "admission_rejected" and "queue ingest" in refused.json()["detail"]
        # Nothing ended yet: one place frees once one of the 3 runs in flight ends, and each has already
        # run IN_FLIGHT seconds (a lower bound), so about IN_FLIGHT / 3 seconds; not the no-evidence 61.
        assert hint == math.ceil(IN_FLIGHT / WORKERS)
        assert hint < retry_after(CEILING, CEILING, 1, Pace())
        assert store_size(database_url) == before
        batch = client.post("/api/v1/runs/batch", json={"runs": [{"task": "ingest", "args": {"n": 1}}]})
        assert batch.status_code == 429 and store_size(database_url) == before
    finally:
        gate.set()

    wait_until(lambda: app.store.status_counts()[RunStatus.COMPLETED] == CEILING, message="every run completed")
    now[0] += STALENESS  # the refusal is repeated without the store for at most this long (api/refusals.py)
    accepted = client.post("/api/v1/runs", json={"task": "ingest", "args": {"n": 100}})
    assert accepted.status_code == 201, accepted.text
    wait_status(app, accepted.json()["id"], RunStatus.COMPLETED)

    gate.clear()
    try:
        wait_until(lambda: app.store.status_counts()[RunStatus.RUNNING] == 0, message="workers idle")
        for n in range(CEILING):
            assert client.post("/api/v1/runs", json={"task": "ingest", "args": {"n": n}}).status_code == 201
        again = client.post("/api/v1/runs", json={"task": "ingest", "args": {"n": 99}})
        assert again.status_code == 429
        # 16 runs ended within the window, 13 of them at once: the hint follows their mean duration.
        assert int(again.headers["Retry-After"]) < hint
    finally:
        gate.set()


def test_a_refusal_is_repeated_without_the_store_for_at_most_the_staleness_bound(app: App, database_url: str) -> None:
    """A flood's 429s come from the last refusal for at most STALENESS seconds, then the store decides again.

    Room is made behind the server's back (runs canceled in the store): within the
    bound the refusal is repeated (counted, with the store's figures and hint), at
    the bound the next submit is stored. Every 201 is the store's decision, so no
    ceiling is passed.
    """
    app.queue("capped", max_active=2)

    @app.task(name="capped", queue="capped")
    def capped() -> None:
        """Never runs: no worker."""

    now = [0.0]  # the first refusal's time; times below are set, not summed, so the bound is exact
    api = app.asgi()
    api.state.refusals = Refusals(clock=lambda: now[0])
    client = local_client(api)
    held = [client.post("/api/v1/runs", json={"task": "capped", "args": {}}).json()["id"] for _ in range(2)]
    first = client.post("/api/v1/runs", json={"task": "capped", "args": {}})
    assert first.status_code == 429
    for run_id in held:
        app.store.cancel_run(run_id)  # room, which this server does not hear of
    before = store_size(database_url)
    now[0] = STALENESS * 0.99
    repeated = client.post("/api/v1/runs", json={"task": "capped", "args": {}})
    assert repeated.status_code == 429, repeated.text
    assert repeated.json() == first.json() and repeated.headers["Retry-After"] == first.headers["Retry-After"]
    assert store_size(database_url) == before
    assert "queue ingest" not in repeated.json()["detail"] and "queue capped" in repeated.json()["detail"]
    other = client.post("/api/v1/runs", json={"task": "capped", "args": {}, "queue": "capped"})
    assert other.status_code == 201, "another request key asks the store"
    now[0] = STALENESS  # nothing else asks the store meanwhile: no grace (api/refusals.py)
    accepted = client.post("/api/v1/runs", json={"task": "capped", "args": {}})
    assert accepted.status_code == 201, accepted.text
    third = client.post("/api/v1/runs", json={"task": "capped", "args": {}})
    assert third.status_code == 429, "the store counts the two new runs: the ceiling holds"
    metrics = client.get("/metrics").text
    assert 'tidegate_admission_rejections_total{queue="capped"} 3.0' in metrics
