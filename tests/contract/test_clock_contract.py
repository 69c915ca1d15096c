"""The store's time is the injected clock: on SQLite its reading, on PostgreSQL the server's plus its offset.

Tests move a `ShiftedClock` instead of sleeping; these pin what that relies
on. On PostgreSQL the offset reaches SQL through `tidegate_now()` (migration
0006) and a per-connection setting written only when the offset is not zero,
so production's system clock costs no statement.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import raw_store
from tidegate.domain.clock import ShiftedClock
from tidegate.domain.model import CycleRequest

OFFSET_SQL = "SELECT current_setting('tidegate.clock_offset', true)"


@pytest.fixture
def pg_store(postgres_url: str) -> Iterator[Any]:
    """A migrated PostgreSQL store on the system clock."""
    store = raw_store(postgres_url)
    store.migrate()
    try:
        yield store
    finally:
        store.close()


def test_stored_times_follow_the_moved_clock(app, clock):
    @app.task(name="t.stamped")
    def stamped() -> None: ...

    clock.advance(3600)
    record = stamped.submit().info()
    assert abs(record.submitted_at.timestamp() - clock.wall()) < 60
    assert record.submitted_at.timestamp() > time.time() + 3000


def test_the_system_clock_sets_no_offset_on_postgres(pg_store):
    pg_store.cycle(CycleRequest("w1", ["q"], [], [], 1, 30))
    with pg_store._connection() as connection:
        assert connection.execute(OFFSET_SQL).fetchone()[0] in (None, "")
        assert connection.execute("SELECT tidegate_now() = now()").fetchone()[0] is True


def test_a_moved_clock_moves_postgres_time_by_its_offset(postgres_url):
    clock = ShiftedClock()
    store = raw_store(postgres_url, clock)
    try:
        store.migrate()
        clock.advance(5)
        with store._connection() as connection:
            ahead = connection.execute("SELECT extract(epoch FROM tidegate_now() - now())::float8").fetchone()[0]
            statement_ahead = connection.execute(
                "SELECT extract(epoch FROM tidegate_statement_timestamp() - statement_timestamp())::float8"
            ).fetchone()[0]
        assert ahead == pytest.approx(5.0) and statement_ahead == pytest.approx(5.0)
    finally:
        store.close()


def test_tidegate_now_is_inlined_into_the_plan(pg_store):
    """STABLE one-expression SQL functions are inlined: a comparison with it plans like one with now()."""
    with pg_store._connection() as connection:
        plan = "\n".join(
            row[0]
            for row in connection.execute(
                "EXPLAIN (VERBOSE, COSTS OFF) SELECT id FROM tidegate_runs WHERE scheduled_at <= tidegate_now()"
            )
        )
    assert "now()" in plan and "tidegate_now" not in plan, plan
