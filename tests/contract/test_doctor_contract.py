"""`doctor_facts` through the Store port: the store's time, the database's own clock, its connection
limits, and the finished runs the retention sweep would delete that are still stored."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from tidegate.domain.model import CycleRequest
from tidegate.storage.postgres.connections import POOL_MAX_SIZE, serve_bound, worker_process_bound

from .conftest import claim, completed, enqueue_one, start

DAY = 86400.0


def test_the_facts_of_a_fresh_store(store, clock, backend):
    facts = store.doctor_facts(7 * DAY)
    assert abs((facts.now - datetime.fromtimestamp(clock.wall(), UTC)).total_seconds()) < 5
    assert (facts.prunable, facts.oldest_prunable_at) == (0, None)
    if backend == "sqlite":
        assert facts.dialect == "sqlite" and facts.server_now is None and facts.max_connections is None
    else:
        assert facts.dialect == "postgresql"
        assert abs((facts.server_now - facts.now).total_seconds()) < 5
        assert facts.max_connections > facts.reserved_connections >= 0
        assert 1 <= facts.connections <= facts.max_connections
        # The one bound (storage/postgres/connections.py): the pool, the worker loop's async pool and
        # both wake-up connections, the worker's and its pool guard's.
        assert facts.per_process == worker_process_bound().total == 2 * POOL_MAX_SIZE + 2
        assert facts.per_process_parts == "a pool of 8, 8 for async calls, 2 for wake-ups"


def test_the_database_clock_is_read_without_the_test_clocks_offset(store, clock, backend):
    clock.advance(600)
    facts = store.doctor_facts(7 * DAY)
    assert abs((facts.now - datetime.fromtimestamp(clock.wall(), UTC)).total_seconds()) < 5  # the store's time
    if backend == "postgres":
        assert (facts.now - facts.server_now).total_seconds() == pytest.approx(600, abs=5)  # the server's own


def test_finished_runs_past_the_retention_are_counted_until_pruned(store, clock):
    run_id = enqueue_one(store)
    [claimed] = claim(store)
    start(store, "w1", [claimed.fence])
    store.cycle(CycleRequest("w1", [claimed.queue], [], [completed(claimed.fence)], 0, 30.0))
    assert store.doctor_facts(DAY).prunable == 0  # ended just now
    clock.advance(DAY + 60)
    enqueue_one(store)  # a queued run is never counted, however old
    facts = store.doctor_facts(DAY)
    assert facts.prunable == 1
    assert facts.oldest_prunable_at == store.get_run(run_id).finished_at
    store.prune_runs(DAY, 100)
    assert store.doctor_facts(DAY).prunable == 0


def test_the_pooler_page_states_the_bounds_doctor_counts():
    """docs/postgres-pooler.md says the figures of the one bound (connections.py), not its own."""
    page = (Path(__file__).parents[2] / "docs" / "postgres-pooler.md").read_text()
    worker, serve = worker_process_bound().total, serve_bound().total
    assert f"a worker process holds at most {worker} connections and `serve` {serve}" in page
