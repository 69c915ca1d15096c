"""The one-statement claim of queues no limit applies to keeps every limit set live (a mutation check).

On PostgreSQL a worker whose queues no limit applies to claims in one
statement (storage/postgres/free_claims.py), chosen on the rules its store has
cached. A limit can be set while it runs: two things keep that limit exact,
and each is taken out here to see the violation it prevents.

- The statement's own check of the rules version: without it, a worker that
  cached "no limit" claims past a limit set since (the cache is only read back
  in the same round trip, after the claim).
- The claim fence the statement runs under: without it, a limit change
  commits while a claim made under the old rules is still in flight.

SQLite has no such path (its claim is one writer's transaction): it runs the
first contract intact; the race needs a statement to stall in, PostgreSQL's.
"""

from __future__ import annotations

import pytest

from tests import races
from tidegate.bootstrap import open_store
from tidegate.domain.model import CycleRequest, RunStatus

from .conftest import LEASE, claim, completed, enqueue_one

FREE = "free"
MUTATION = pytest.mark.parametrize("removed", [False, True], ids=["intact", "removed"])
GUARD = "value = %(known)s::text"


def _only_on_postgres(backend: str, removed: bool) -> None:
    if removed and backend != "postgres":
        pytest.skip("SQLite has no one-statement claim: nothing to take out")


@MUTATION
def test_a_limit_set_live_holds_back_the_next_one_statement_claim(store, database_url, backend, removed):
    """The worker's store caches the rules (no limit) with a first claim; another store then sets a
    global limit of 1. The next claim of 3 must take 1; without the version check it takes 3."""
    _only_on_postgres(backend, removed)
    assert claim(store, "w1", limit=3, queues=[FREE]) == []  # caches the rules: no limit
    if removed:
        assert GUARD in store._queries["claim_runs_free"]  # type: ignore[attr-defined]
        store._queries = {  # type: ignore[attr-defined]
            **store._queries,  # type: ignore[attr-defined]
            "claim_runs_free": store._queries["claim_runs_free"].replace(GUARD, "%(known)s::text IS NOT NULL"),  # type: ignore[attr-defined]
        }
    for _ in range(3):
        enqueue_one(store, FREE)
    other = open_store(database_url)
    try:
        other.set_limit("global", 1)
    finally:
        other.close()
    taken = len(claim(store, "w1", limit=3, queues=[FREE]))
    assert (taken > 1) is removed, taken
    if not removed:
        assert taken == 1 and store.rules().global_limit() == 1


@MUTATION
def test_a_limit_change_waits_for_a_one_statement_claim_in_flight(store, database_url, backend, removed):
    """A claim of the unlimited queue has claimed (not committed) and stalls before its commit;
    meanwhile a global limit of 1 is set. The change must wait for the claim (which then commits
    first, under the rules it read); without the claim fence the change commits while three runs
    claimed under no limit are still to come."""
    if backend != "postgres":
        pytest.skip("SQLite has no one-statement claim (its one writer excludes a rules change: test_serialization)")
    assert claim(store, "w0", limit=3, queues=[FREE]) == []  # caches the rules: no limit
    for _ in range(3):
        enqueue_one(store, FREE)
    races.track(store)
    if removed:
        races.remove_query(store, "claim_fence")
    claimer = races.Party("claimer", lambda: claim(store, "w1", limit=3, queues=[FREE]))
    changer = races.Party("changer", lambda: store.set_limit("global", 1))
    race = races.Race(database_url)
    try:
        with race.stall() as stall:  # the claim is one statement: stall after it, before the commit
            # in cancel_requests' place, with its shape: two columns, no row
            stalled = f"SELECT NULL::text, NULL::integer FROM ({stall}) AS l(v) WHERE l.v::text = 'never'"
            races.stall_query(store, claimer, "cancel_requests", stalled)
            race.run(claimer, changer, first_parked=race.blocked, release=race.release_stall)
    finally:
        race.close()
    assert claimer.error is None and changer.error is None, (claimer.error, changer.error)
    assert race.second_ended_first is removed
    assert len(claimer.result) == 3  # claimed before the change, under no limit
    assert store.rules().global_limit() == 1


def test_a_one_batch_cycle_that_fails_midway_commits_nothing(store, backend, monkeypatch):
    """A cycle with a one-statement claim is one implicit transaction (no BEGIN): a failure after
    its reports were sent must not commit them, though the pipeline still sends its Sync."""
    if backend != "postgres":
        pytest.skip("SQLite's cycle is an explicit transaction")
    from tidegate.storage.postgres import free_claims

    enqueue_one(store, FREE)
    [run] = claim(store, "w1", limit=1, queues=[FREE])  # caches the rules: the next claim is one statement
    enqueue_one(store, FREE)

    def broken(*args, **kwargs):
        raise RuntimeError("failed between two statements of the batch")

    monkeypatch.setattr(free_claims, "send", broken)
    with pytest.raises(RuntimeError):
        store.cycle(CycleRequest("w1", [FREE], [run.fence], [completed(run.fence)], 1, LEASE))
    monkeypatch.undo()
    assert store.get_run(run.id).status is RunStatus.RUNNING
    assert store.status_counts(FREE)[RunStatus.QUEUED] == 1
