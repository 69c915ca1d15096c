"""Runs claimed ahead of a worker's free slots are taken only where no limit applies (a mutation check).

A worker whose runs end fast asks a cycle to claim more than its free slots
(`CycleRequest.claim_ahead`): those runs wait on the worker for a slot, and run
while its next cycle is in flight. Only a free claim (`ClaimPlan.free`: no limit,
per-worker cap or fair order on its queues) may take them; any other claim takes
at most the free slots' worth (`CycleRequest.plain_limit`), so a run under a limit
never holds a slot of it while it waits for the worker. The rule is taken out
here (the plain limit made the whole claim limit) to see the run a limited claim
then takes ahead. Both adapters; on PostgreSQL the free claim is one statement.
"""

from __future__ import annotations

import pytest

from tidegate.domain.model import CycleRequest

from .conftest import LEASE, enqueue_one

FREE, LIMITED = "ahead.free", "ahead.limited"
MUTATION = pytest.mark.parametrize("removed", [False, True], ids=["intact", "removed"])


def _claim(store, queue: str, limit: int, ahead: int) -> int:
    return len(store.cycle(CycleRequest("w1", [queue], [], [], limit, LEASE, ahead)).claimed)


def _remove_the_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(CycleRequest, "plain_limit", property(lambda request: request.claim_limit))


def test_a_free_claim_takes_the_runs_ahead_too(store):
    for _ in range(6):
        enqueue_one(store, FREE)
    assert _claim(store, FREE, 2, 0) == 2  # rules cached: the next claim is free on both paths
    assert _claim(store, FREE, 3, 2) == 3
    assert _claim(store, FREE, 3, 3) == 1  # none free, all ahead: the last run


@MUTATION
def test_a_limited_claim_takes_none_ahead(store, monkeypatch, removed):
    """A queue limit of 5 with room for all: a claim of 4, 3 of them ahead, takes 1; with no free
    slot (all ahead) it takes none. Without the rule it takes 4, then 3 more."""
    store.set_limit(f"queue:{LIMITED}", 5)
    for _ in range(8):
        enqueue_one(store, LIMITED)
    assert _claim(store, LIMITED, 1, 0) == 1  # rules cached
    if removed:
        _remove_the_rule(monkeypatch)
    taken = [_claim(store, LIMITED, 4, 3), _claim(store, LIMITED, 3, 3)]
    assert taken == ([4, 0] if removed else [1, 0]), taken


@MUTATION
def test_a_limit_set_after_the_rules_were_cached_takes_none_ahead(store, database_url, monkeypatch, removed):
    """The worker's store cached "no limit"; another store then limits the queue. On PostgreSQL the
    one-statement claim refuses on the changed rules and the general claim takes the plain limit."""
    from tidegate.bootstrap import open_store

    for _ in range(6):
        enqueue_one(store, FREE)
    assert _claim(store, FREE, 1, 0) == 1  # caches the rules: no limit
    other = open_store(database_url)
    try:
        other.set_limit(f"queue:{FREE}", 10)
    finally:
        other.close()
    if removed:
        _remove_the_rule(monkeypatch)
    taken = _claim(store, FREE, 4, 2)
    assert taken == (4 if removed else 2), taken
