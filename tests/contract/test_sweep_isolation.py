"""A budget at the column's end, and one verdict the database refuses, stop no recovery (issue 23 item 6).

An attempt that does not count (an uncharged rescue, a hand-back, a wait on
children) grows `max_attempts` by one: at 2^31-1 that used to overflow
PostgreSQL's `integer`, and as the sweep writes every lost run's verdict in one
statement, one such run kept every other lost run `running` on every pass.
Now the growth saturates (`domain.integers.grown`), and a verdict the database
refuses for any reason (here a trigger added behind tidegate's back) is
isolated: reported by run id, the run left as it was, the others recovered.
Such rows are written straight to the store: declarations refuse these budgets.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.conftest import execute_sql
from tidegate.domain.integers import STORED_INT_MAX
from tidegate.domain.model import RunStatus
from tidegate.storage.port import Store

from .conftest import LEASE, claim, enqueue_one


def _lost(store: Store, clock, budgets: list[int]) -> list[str]:
    """Runs claimed together by a worker that then vanished (never started: rescues charge none)."""
    ids = [enqueue_one(store, max_attempts=budget) for budget in budgets]
    assert len(claim(store, "gone", limit=len(ids))) == len(ids)
    clock.advance(LEASE + 1)
    return ids


def test_an_uncharged_rescue_at_the_column_end_saturates_and_the_others_are_recovered(store: Store, clock) -> None:
    edge, other = _lost(store, clock, [STORED_INT_MAX, 3])
    report = store.sweep("sweeper", 0.05)
    assert report is not None and sorted(report.requeued) == sorted([edge, other]), report
    assert report.unapplied == {}
    assert store.get_run(edge).max_attempts == STORED_INT_MAX  # saturated, not overflowed
    assert store.get_run(other).max_attempts == 4  # not charged: the budget grows as ever


def test_a_hand_back_at_the_column_end_requeues_the_run(store: Store) -> None:
    edge = enqueue_one(store, max_attempts=STORED_INT_MAX)
    [run] = claim(store, "leaving")
    assert store.hand_back("leaving", [run.fence]) == [edge]
    record = store.get_run(edge)
    assert record.status is RunStatus.QUEUED and record.max_attempts == STORED_INT_MAX


def _drop_trigger(database_url: str) -> None:
    sqlite = database_url.startswith("sqlite")
    execute_sql(database_url, "DROP TRIGGER IF EXISTS refuse_run" + ("" if sqlite else " ON tidegate_runs"))


@pytest.fixture
def refuse_updates(database_url: str) -> Iterator[Callable[[str], None]]:
    """`refuse_updates(run_id)`: a trigger, behind tidegate's back, refuses every update of that run."""

    def refuse(run_id: str) -> None:
        if database_url.startswith("sqlite"):
            execute_sql(
                database_url,
                f"CREATE TRIGGER refuse_run BEFORE UPDATE ON tidegate_runs WHEN OLD.id = '{run_id}' "
                "BEGIN SELECT RAISE(ABORT, 'refused by the test'); END",
            )
            return
        execute_sql(
            database_url,
            "CREATE FUNCTION refuse_run() RETURNS trigger LANGUAGE plpgsql AS "
            "$$ BEGIN RAISE EXCEPTION 'refused by the test'; END $$",
        )
        execute_sql(
            database_url,
            f"CREATE TRIGGER refuse_run BEFORE UPDATE ON tidegate_runs FOR EACH ROW "
            f"WHEN (OLD.id = '{run_id}') EXECUTE FUNCTION refuse_run()",
        )

    yield refuse
    _drop_trigger(database_url)


def test_a_verdict_the_database_refuses_is_reported_and_blocks_none_of_the_others(
    store: Store, clock, database_url: str, refuse_updates: Callable[[str], None]
) -> None:
    first, bad, last = _lost(store, clock, [2, 2, 2])
    refuse_updates(bad)
    report = store.sweep("sweeper", 0.05)
    assert report is not None and sorted(report.requeued) == sorted([first, last]), report
    assert list(report.unapplied) == [bad] and "refused by the test" in report.unapplied[bad]
    assert store.get_run(bad).status is RunStatus.RUNNING  # left as it was, its holders with it
    assert [event.type for event in store.run_events(bad)][-1] != "RunRequeued"
    assert store.get_run(first).status is RunStatus.QUEUED and store.get_run(last).status is RunStatus.QUEUED

    _drop_trigger(database_url)
    again = store.sweep("sweeper", 0.05)
    assert again is not None and again.requeued == [bad] and again.unapplied == {}
