"""PostgreSQL: a claim locks the rate states it charges by key, not by walking every stored state.

A claim's transaction runs with enable_sort off (claims.sql, claim_fence), and
`rate_states` locks its rows in key order (ORDER BY ... FOR UPDATE). Written as
a join of the stored states with the keys, the plan that avoided the sort walked
the whole primary key and matched each state against every key: with 1,000 rate
partitions a claim of 16 visited 1,000 rows and compared 16,000 pairs, most of
what a partitioned rate cost per run (issue 25's partitions benchmark, 2.0x one
partition). Read by `scope = ANY(...)`, it visits only the keys asked for.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import psycopg
import pytest

from tidegate import App, Partition, Rate
from tidegate.domain.model import CycleRequest
from tidegate.storage.shared.sqlfile import load_queries

QUERIES = load_queries("tidegate.storage.postgres")
STATES = 1000
WINDOW = 10**9
ASKED = [f"rate:rated/p={n:04d}" for n in range(200, 216)]


@pytest.fixture
def connection(postgres_url: str) -> Iterator[psycopg.Connection[tuple[object, ...]]]:
    with psycopg.connect(postgres_url, autocommit=True) as opened:
        opened.execute(
            "INSERT INTO tidegate_rate_states (scope, window_ns, tat_ns) "
            "SELECT 'rate:rated/p=' || lpad(g::text, 4, '0'), %(window)s, 0 FROM generate_series(0, %(n)s - 1) AS g",
            {"window": WINDOW, "n": STATES},
        )
        # a second window of one asked key, and the asked window of a key not asked: neither matched wrongly
        opened.execute(
            "INSERT INTO tidegate_rate_states VALUES (%(a)s, 60 * %(w)s::bigint, 0), ('rate:other', %(w)s, 0)",
            {"a": ASKED[3], "w": WINDOW},
        )
        opened.execute("ANALYZE tidegate_rate_states")
        yield opened


def test_a_claim_locks_only_the_rate_states_it_charges_in_key_order(connection) -> None:
    keys = sorted([*ASKED, "rate:absent"])
    params = {"scopes": keys, "windows": [WINDOW] * len(keys)}
    with connection.transaction():
        connection.execute(QUERIES["claim_fence"])  # as in a claim: enable_sort off
        connection.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        plan = "\n".join(
            str(row[0]) for row in connection.execute("EXPLAIN (ANALYZE) " + QUERIES["rate_states"], params)
        )
        rows = connection.execute(QUERIES["rate_states"], params).fetchall()
    assert [(scope, window) for _, scope, window, _ in rows] == [(scope, WINDOW) for scope in ASKED]
    visited = [int(n) for n in re.findall(r"Scan[^\n]* on tidegate_rate_states s[^\n]*actual[^\n]* rows=(\d+)", plan)]
    assert visited and sum(visited) <= len(ASKED) + 1, f"the lock visits more states than it was asked:\n{plan}"


def test_a_claim_whose_rules_moved_past_the_windows_it_locked_ahead_looks_again(postgres_url) -> None:
    """The first batch locks a queue's one budget on the cached rules; when the rules in force make
    a run charge another window (here the rate became partitioned), locking it now could break
    the key order (claiming.ahead_rate_keys): the claim takes nothing and looks again at once,
    and the next one, planned on the rules in force, charges both."""
    with App(postgres_url) as first:
        first.queue("q", rate=Rate(limit=1000, per="1s"))
        first.task(name="locks.one", queue="q")(lambda n: n).submit_many([{"n": 0}, {"n": 1}])
        assert len(first.store.cycle(CycleRequest("w0", ["q"], [], [], 1, 60.0)).claimed) == 1  # rules cached
        with App(postgres_url) as second:
            second.queue("q", rate=Rate(limit=1000, per="1s"), rate_partition=Partition(by_args=["n"]))
            second.task(name="locks.one", queue="q")(lambda n: n).submit(n=5)
        moved = first.store.cycle(CycleRequest("w1", ["q"], [], [], 4, 60.0))
        assert moved.claimed == [] and moved.next_due_in == 0.0
        after = first.store.cycle(CycleRequest("w1", ["q"], [], [], 4, 60.0))
        assert len(after.claimed) == 2
