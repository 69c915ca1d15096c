"""The worker registry through the Store port: ranks, heartbeats, leaving.

A rank is the lowest one free among live workers (the fill order relies on
it); a worker that heartbeats keeps it, one that leaves or expires frees it.
Same expectations on both adapters.
"""

from __future__ import annotations

import pytest

from tidegate.domain.model import WorkerRegistration

from .conftest import QUEUE

TTL = 60.0


def register(store, worker_id: str, ttl: float = TTL) -> int:
    return store.register_worker(WorkerRegistration(worker_id, 4, [QUEUE], True, ttl))


def test_ranks_are_the_lowest_free_and_stable_for_a_worker_that_registers_again(store):
    assert [register(store, worker) for worker in ("a", "b", "c")] == [0, 1, 2]
    assert register(store, "b") == 1
    assert (
        store.register_worker(WorkerRegistration("d", 1, ["elsewhere"], False, TTL)) == 3
    )  # ranks are shared by every queue


def test_a_worker_that_leaves_frees_its_rank_for_the_next_one(store):
    for worker in ("a", "b", "c"):
        register(store, worker)
    store.deregister_worker("b")
    assert register(store, "d") == 1
    store.deregister_worker("no-such-worker")  # leaving twice, or never having come, is harmless


def test_a_heartbeat_says_whether_the_worker_is_still_registered(store):
    register(store, "a")
    assert store.heartbeat_worker("a", TTL) is True
    assert store.heartbeat_worker("never-registered", TTL) is False
    store.deregister_worker("a")
    assert store.heartbeat_worker("a", TTL) is False


def test_a_leaving_worker_hands_its_sweeper_turn_to_the_others_at_once(store):
    register(store, "a")
    assert store.sweep("a", 600) is not None
    assert store.sweep("b", 600) is None
    store.deregister_worker("a")
    assert store.sweep("b", 600) is not None


@pytest.mark.advances_clock
def test_a_worker_whose_ttl_lapsed_loses_its_rank(store, clock):
    register(store, "a", ttl=10)
    register(store, "b", ttl=600)
    clock.advance(11)
    assert register(store, "c") == 0


@pytest.mark.advances_clock
def test_a_heartbeat_extends_the_ttl_so_the_rank_is_kept(store, clock):
    register(store, "a", ttl=10)
    clock.advance(6)
    assert store.heartbeat_worker("a", 10) is True
    clock.advance(6)
    assert register(store, "b") == 1  # "a" is alive: 12 s after registering, 6 s after its heartbeat
    clock.advance(11)
    assert register(store, "c") == 0  # both lapsed now
