"""PostgreSQL: a run's own slots live in its row (migration 0030_run_scopes.sql).

A limited claim writes the scopes each run takes into the run's row (`held_scopes`) instead of
holder rows, and a run holds them only while it runs (a waiting run: what its wait kept); every
reader sums `tidegate_slot_holders`. Pinned here: a claim writes no holder row and its slots are
counted and freed by the run's status alone, and the upgrade of a database with runs in flight
under limits (their holder rows written before 0030) counts and frees each slot exactly once.
"""

from __future__ import annotations

import pytest

from tidegate import App, Concurrency, RunQueueConfig, TagConcurrencyLimit
from tidegate.domain.model import CycleRequest, Outcome, OutcomeKind

from .conftest import execute_sql, raw_store

QUEUE = "rsc"
LIMIT = 2
FULL = {"global": LIMIT, f"queue:{QUEUE}": LIMIT, "tag:env=prod": LIMIT}
# The schema before 0030, the runs in flight holding holder rows as a claim then wrote them.
BEFORE_0030 = (
    "INSERT INTO tidegate_holders (scope, holder, run_id, attempt, worker_id, slots, claimed_at, expires_at) "
    "SELECT s.scope, r.id, r.id, r.attempt, r.worker_id, 1, r.claimed_at, r.lease_expires_at "
    "FROM tidegate_runs AS r CROSS JOIN LATERAL jsonb_array_elements_text(r.held_scopes) AS s(scope) "
    "WHERE r.status = 'running'",
    "DROP VIEW tidegate_slot_holders",
    "ALTER TABLE tidegate_runs DROP COLUMN held_scopes",
    "ALTER TABLE tidegate_runs DROP COLUMN claimed_at",
    "DELETE FROM tidegate_schema_version WHERE version = 30",
)


@pytest.fixture
def limited(database_url, backend):
    if backend != "postgres":
        pytest.skip("SQLite keeps a run's holders as rows (its migration 0030 only names the view)")
    application = App(
        database_url,
        run_queue=RunQueueConfig(
            max_concurrent_runs=LIMIT, tag_concurrency_limits=[TagConcurrencyLimit("env", LIMIT, value="prod")]
        ),
    )
    application.queue(QUEUE, concurrency=Concurrency(global_limit=LIMIT))

    @application.task(name="rsc.work", queue=QUEUE)
    def work() -> None:
        """Never run: the test drives the store's verbs."""

    try:
        yield application
    finally:
        application.close()


def _holder_rows(database_url: str) -> int:
    return int(execute_sql(database_url, "SELECT count(*) FROM tidegate_holders")[0][0])


def _end(store, worker: str, run) -> None:
    outcome = Outcome(run.id, run.attempt, OutcomeKind.COMPLETED)
    assert store.cycle(CycleRequest(worker, [QUEUE], [run.fence], [outcome], 0, 60)).fenced_out == []


def test_a_limited_claim_writes_no_holder_row_and_its_runs_status_frees_the_slots(limited, database_url):
    store = limited.store
    for _ in range(LIMIT + 1):
        limited.tasks["rsc.work"].options(tags={"env": "prod"}).submit()
    claimed = store.cycle(CycleRequest("w-1", [QUEUE], [], [], LIMIT + 1, 60)).claimed
    assert len(claimed) == LIMIT
    assert _holder_rows(database_url) == 0
    assert store.scope_usage() == FULL
    assert {holder.run_id for holder in store.scope_holders("global")} == {run.id for run in claimed}
    assert store.cycle(CycleRequest("w-2", [QUEUE], [], [], 1, 60)).claimed == []
    store.hand_back("w-1", [run.fence for run in claimed])
    assert store.scope_usage() == {}


def test_runs_claimed_before_0030_keep_their_slots_counted_across_the_upgrade(limited, database_url):
    store = limited.store
    runs = [limited.tasks["rsc.work"].options(tags={"env": "prod"}).submit() for _ in range(LIMIT + 1)]
    claimed = store.cycle(CycleRequest("w-old", [QUEUE], [], [], LIMIT + 1, 60)).claimed
    assert len(claimed) == LIMIT
    for statement in BEFORE_0030:
        execute_sql(database_url, statement)
    assert _holder_rows(database_url) == LIMIT * len(FULL)

    upgrading = raw_store(database_url)
    try:
        assert upgrading.migrate() == [30]
    finally:
        upgrading.close()

    assert _holder_rows(database_url) == 0  # moved into the runs' rows, not copied
    assert store.scope_usage() == FULL  # the slots taken before are still counted, once
    assert store.cycle(CycleRequest("w-new", [QUEUE], [], [], 1, 60)).claimed == []
    first, second = claimed
    _end(store, "w-old", first)
    assert store.scope_usage() == dict.fromkeys(FULL, LIMIT - 1)  # freed once, by the run's end
    [third] = store.cycle(CycleRequest("w-new", [QUEUE], [], [], LIMIT, 60)).claimed
    assert third.id == runs[-1].id
    _end(store, "w-old", second)
    _end(store, "w-new", third)
    assert store.scope_usage() == {}
