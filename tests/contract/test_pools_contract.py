"""Pools through the Store port: configuration, all-or-none grants, renewal, release, expiry.

Each verb's core promise on both adapters, with explicit fences; the deeper
interleavings (hand-offs, stale attempts, windows) are in pools/test_pools_store.py
and pools/test_pools_handoff.py.
"""

from __future__ import annotations

import pytest

from tidegate import PoolRequestTooLarge
from tidegate.domain.pools import pool_needs
from tidegate.domain.steps import SlotRequest
from tidegate.storage.port import Fence

from .conftest import claim, enqueue_one


def running_fence(store, worker: str = "w1") -> Fence:
    enqueue_one(store)
    [run] = claim(store, worker)
    return run.fence


def usage(store) -> dict[str, int]:
    return {pool.name: pool.claimed for pool in store.pools()}


def test_set_pool_limit_configures_and_reconfigures_a_pool(store):
    assert store.pools() == []
    config = store.set_pool_limit("db", 3, 120)
    assert (config.name, config.limit, config.lease_seconds) == ("db", 3, 120)
    store.set_pool_limit("db", 5, 60)
    [status] = store.pools()
    assert (status.name, status.limit, status.lease_seconds, status.claimed, status.pending, status.configured) == (
        "db",
        5,
        60,
        0,
        0,
        True,
    )


def test_a_grant_is_all_or_none_and_a_refusal_names_the_full_pool(store):
    store.set_pool_limit("a", 1, 300)
    store.set_pool_limit("b", 2, 300)
    first, second = running_fence(store), running_fence(store)
    grant = store.acquire_slots(first, "w1", SlotRequest("one", pool_needs({"a": 1, "b": 1}), {}))
    assert grant.granted and grant.lease_seconds == 300 and not grant.fenced_out

    refused = store.acquire_slots(second, "w1", SlotRequest("two", pool_needs({"a": 1, "b": 1}), {}))
    assert not refused.granted and [(use.name, use.used, use.limit) for use in refused.blocking] == [("a", 1, 1)]
    assert usage(store) == {"a": 1, "b": 1}  # nothing of b was taken for the refused step
    assert {pool.name: pool.pending for pool in store.pools()} == {"a": 1, "b": 1}
    [holder] = store.pool_holders("a")
    assert (holder.run_id, holder.attempt, holder.worker_id, holder.slots) == (first[0], first[1], "w1", 1)


def test_a_request_no_limit_can_satisfy_raises(store):
    store.set_pool_limit("gpu", 2, 300)
    fence = running_fence(store)
    with pytest.raises(PoolRequestTooLarge):
        store.acquire_slots(fence, "w1", SlotRequest("train", pool_needs({"gpu": 3}), {}))
    assert store.pool_holders("gpu") == []


def test_release_frees_the_slots_for_the_next_step(store):
    store.set_pool_limit("a", 1, 300)
    first, second = running_fence(store), running_fence(store)
    assert store.acquire_slots(first, "w1", SlotRequest("s", pool_needs({"a": 1}), {})).granted
    store.release_slots(first, "s")
    assert store.pool_holders("a") == []
    assert store.acquire_slots(second, "w1", SlotRequest("s", pool_needs({"a": 1}), {})).granted


def test_renew_slots_extends_a_held_lease_and_says_false_once_released(store):
    store.set_pool_limit("a", 1, 300)
    fence = running_fence(store)
    store.acquire_slots(fence, "w1", SlotRequest("s", pool_needs({"a": 1}), {}))
    assert store.renew_slots(fence, "s") is True
    assert "StepSlotRenewed" in [event.type for event in store.run_events(fence[0])]
    store.release_slots(fence, "s")
    assert store.renew_slots(fence, "s") is False


def test_acquire_many_judges_requests_in_order_each_seeing_the_grants_before_it(store):
    store.set_pool_limit("db", 2, 300)
    fence = running_fence(store)
    grants = store.acquire_many(fence, "w1", [SlotRequest(f"s{i}", pool_needs({"db": 1})) for i in range(3)])
    assert [grant.granted for grant in grants] == [True, True, False]
    assert usage(store) == {"db": 2}


def test_acquire_many_of_an_attempt_that_is_not_current_is_none(store):
    store.set_pool_limit("db", 2, 300)
    run, attempt = running_fence(store)
    assert store.acquire_many((run, attempt + 1), "w1", [SlotRequest("s", pool_needs({"db": 1}))]) is None
    assert store.pool_holders("db") == []


@pytest.mark.advances_clock
def test_the_sweep_frees_the_slots_of_a_step_whose_pool_lease_lapsed(store, clock):
    store.set_pool_limit("a", 1, 60)
    crashed, waiting = running_fence(store), running_fence(store)
    assert store.acquire_slots(crashed, "w1", SlotRequest("s", pool_needs({"a": 1}), {})).granted
    store.renew_leases("w1", [crashed, waiting], 3600)  # the runs stay alive: only the pool lease lapses
    clock.advance(61)
    report = store.sweep("sweeper", 1)
    assert (report.step_slots_expired, report.requeued) == (1, [])
    assert store.pool_holders("a") == [] and store.renew_slots(crashed, "s") is False
    assert store.acquire_slots(waiting, "w1", SlotRequest("s", pool_needs({"a": 1}), {})).granted


def test_pool_waiters_lists_the_steps_a_full_pool_keeps_waiting(store):
    store.set_pool_limit("db", 1, 60)
    holder, waiter = running_fence(store, "w1"), running_fence(store, "w2")
    assert store.acquire_slots(holder, "w1", SlotRequest("a", pool_needs({"db": 1}), {})).granted
    assert not store.acquire_slots(waiter, "w2", SlotRequest("b", pool_needs({"db": 1}), {})).granted
    [waiting] = store.pool_waiters("db")
    assert (waiting.run_id, waiting.step_key, waiting.attempt, waiting.slots) == (waiter[0], "b", waiter[1], 1)
    assert waiting.since is not None
    assert store.pool_waiters("other") == []
