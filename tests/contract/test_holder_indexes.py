"""PostgreSQL's holder indexes by holder and by expiry hold step holders only (migration 0031).

A run's own holders (holder = run id, one per scope of a limited claim) are read by scope and by
run; leaving them out of the two indexes only steps read halves the index entries each one costs
(issue 29, cost of limits). Pinned here: the indexes' shape, so a migration that rebuilt them whole
would fail a test, and the upgrade of a database with runs in flight under limits, whose holders
written under the old indexes are still counted and released exactly once.
"""

from __future__ import annotations

import pytest

from tidegate import App, Concurrency, RunQueueConfig, TagConcurrencyLimit
from tidegate.domain.model import CycleRequest, Outcome, OutcomeKind

from .conftest import execute_sql, raw_store

QUEUE = "hix"
LIMIT = 2
OLD_INDEXES = (
    "DROP INDEX tidegate_holders_holder",
    "DROP INDEX tidegate_holders_expiry",
    "CREATE INDEX tidegate_holders_holder ON tidegate_holders (holder)",
    "CREATE INDEX tidegate_holders_expiry ON tidegate_holders (expires_at)",
    "DELETE FROM tidegate_schema_version WHERE version = 31",
)


@pytest.fixture
def limited(database_url, backend):
    if backend != "postgres":
        pytest.skip("SQLite keeps its holder indexes (its migration 0031 is empty)")
    application = App(
        database_url,
        run_queue=RunQueueConfig(
            max_concurrent_runs=LIMIT, tag_concurrency_limits=[TagConcurrencyLimit("env", LIMIT, value="prod")]
        ),
    )
    application.queue(QUEUE, concurrency=Concurrency(global_limit=LIMIT))

    @application.task(name="hix.work", queue=QUEUE)
    def work() -> None:
        """Never run: the test drives the store's verbs."""

    try:
        yield application
    finally:
        application.close()


def _indexes(database_url: str) -> dict[str, str]:
    rows = execute_sql(  # this test's schema only: other schemas come and go meanwhile
        database_url,
        "SELECT indexname, indexdef FROM pg_indexes"
        " WHERE schemaname = current_schema() AND tablename = 'tidegate_holders'",
    )
    return {str(name): str(definition) for name, definition in rows}


def test_the_holder_and_expiry_indexes_leave_a_runs_own_holders_out(limited, database_url):
    indexes = _indexes(database_url)
    for name in ("tidegate_holders_holder", "tidegate_holders_expiry"):
        assert indexes[name].endswith("WHERE (holder <> run_id)"), indexes[name]
    assert "WHERE" not in indexes["tidegate_holders_run"] and "WHERE" not in indexes["tidegate_holders_pkey"]


def test_runs_claimed_under_the_old_indexes_keep_their_slots_counted_across_the_upgrade(limited, database_url):
    store = limited.store
    runs = [limited.tasks["hix.work"].options(tags={"env": "prod"}).submit() for _ in range(LIMIT + 1)]
    for statement in OLD_INDEXES:
        execute_sql(database_url, statement)
    claimed = store.cycle(CycleRequest("w-old", [QUEUE], [], [], LIMIT + 1, 60)).claimed
    assert len(claimed) == LIMIT
    full = {"global": LIMIT, f"queue:{QUEUE}": LIMIT, "tag:env=prod": LIMIT}
    assert store.scope_usage() == full

    upgrading = raw_store(database_url)
    try:
        assert upgrading.migrate() == [31]
    finally:
        upgrading.close()
    test_the_holder_and_expiry_indexes_leave_a_runs_own_holders_out(limited, database_url)

    assert store.scope_usage() == full  # the holders written before are still counted
    assert store.cycle(CycleRequest("w-new", [QUEUE], [], [], 1, 60)).claimed == []
    first, second = claimed
    ended = store.cycle(
        CycleRequest("w-old", [QUEUE], [first.fence], [Outcome(first.id, first.attempt, OutcomeKind.COMPLETED)], 0, 60)
    )
    assert ended.fenced_out == []
    assert store.scope_usage() == dict.fromkeys(full, LIMIT - 1)  # released once, by the run
    [third] = store.cycle(CycleRequest("w-new", [QUEUE], [], [], LIMIT, 60)).claimed
    assert third.id == runs[-1].id
    for run, worker in ((second, "w-old"), (third, "w-new")):
        outcome = Outcome(run.id, run.attempt, OutcomeKind.COMPLETED)
        assert store.cycle(CycleRequest(worker, [QUEUE], [run.fence], [outcome], 0, 60)).fenced_out == []
    assert store.scope_usage() == {}
    assert execute_sql(database_url, "SELECT count(*) FROM tidegate_holders") == [(0,)]
