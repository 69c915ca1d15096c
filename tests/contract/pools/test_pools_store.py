"""Step-level gates through the store port, on both adapters: pools, slots, steps, map windows.

The verbs are driven directly with explicit fences so every interleaving is
exact rather than left to timing.
"""

from __future__ import annotations

import time

import pytest

from tidegate import PoolRequestTooLarge
from tidegate.domain.model import CycleRequest, Outcome, OutcomeKind
from tidegate.domain.pools import fanout_scope, pool_needs
from tidegate.domain.steps import SlotRequest, StepStatus, StepUpdate

from .conftest import QUEUE, claim, step_events, usage


def test_a_grant_holds_weighted_slots_until_released(store, job):
    config = store.set_pool_limit("database", 5, 300)
    assert (config.name, config.limit, config.lease_seconds) == ("database", 5, 300)
    fence = claim(store, job)
    grant = store.acquire_slots(fence, "w1", SlotRequest("heavy[0]", pool_needs({"database": 2}), {}))
    assert grant.granted and grant.blocking == [] and grant.lease_seconds == 300
    [status] = store.pools()
    assert (status.name, status.limit, status.lease_seconds, status.claimed, status.pending) == (
        "database",
        5,
        300,
        2,
        0,
    )
    [holder] = store.pool_holders("database")
    assert (holder.run_id, holder.step_key, holder.slots, holder.attempt) == (fence[0], "heavy[0]", 2, fence[1])
    assert 299 < (holder.expires_at - holder.claimed_at).total_seconds() <= 300.01

    store.release_slots(fence, "heavy[0]")
    assert store.pool_holders("database") == [] and usage(store) == {"database": 0}
    assert step_events(store, fence[0]) == ["StepSlotClaimed", "StepSlotReleased"]
    claimed, released = [e for e in store.run_events(fence[0]) if e.step_key]
    assert claimed.metadata == {"attempt": 1, "pools": {"database": 2}}
    assert released.metadata == {"attempt": 1, "pools": {"database": 2}, "reason": "released"}


def test_all_or_none_across_pools(store, job):
    store.set_pool_limit("a", 1, 300)
    store.set_pool_limit("b", 1, 300)
    first, second = claim(store, job), claim(store, job)
    assert store.acquire_slots(first, "w1", SlotRequest("one", pool_needs({"a": 1}), {})).granted

    for _ in range(3):  # refused again and again: one StepSlotWaiting, no partial hold of b
        refused = store.acquire_slots(second, "w1", SlotRequest("both", pool_needs({"a": 1, "b": 1}), {}))
        assert not refused.granted and not refused.fenced_out
        assert [(u.name, u.used, u.limit) for u in refused.blocking] == [("a", 1, 1)]
        assert usage(store) == {"a": 1, "b": 0}
    assert step_events(store, second[0]) == ["StepSlotWaiting"]
    [waiting] = [e for e in store.run_events(second[0]) if e.step_key]
    assert waiting.metadata["blocked_by"] == [{"pool": "a", "claimed": 1, "limit": 1, "slots": 1}]
    assert {p.name: p.pending for p in store.pools()} == {"a": 1, "b": 1}
    [step] = store.run_steps(second[0])
    assert step.waiting_for == {"pool:a": 1, "pool:b": 1} and step.status is StepStatus.PENDING

    store.release_slots(first, "one")
    assert store.acquire_slots(second, "w1", SlotRequest("both", pool_needs({"a": 1, "b": 1}), {})).granted
    assert usage(store) == {"a": 1, "b": 1}
    assert {p.name: p.pending for p in store.pools()} == {"a": 0, "b": 0}
    assert store.run_steps(second[0])[0].waiting_for is None


def test_reacquiring_what_a_step_holds_is_a_grant(store, job):
    store.set_pool_limit("a", 2, 300)
    fence = claim(store, job)
    assert store.acquire_slots(fence, "w1", SlotRequest("s", pool_needs({"a": 2}), {})).granted
    assert store.acquire_slots(fence, "w1", SlotRequest("s", pool_needs({"a": 2}), {})).granted
    assert usage(store) == {"a": 2}
    assert step_events(store, fence[0]) == ["StepSlotClaimed"]


def test_a_request_over_the_limit_fails_at_once_and_changes_nothing(store, job):
    store.set_pool_limit("gpu", 2, 300)
    fence = claim(store, job)
    with pytest.raises(PoolRequestTooLarge, match=r"3 slots of pool 'gpu', whose limit is 2") as caught:
        store.acquire_slots(fence, "w1", SlotRequest("train", pool_needs({"gpu": 3, "other": 1}), {}))
    assert (caught.value.pool, caught.value.slots, caught.value.limit) == ("gpu", 3, 2)
    assert store.pool_holders("gpu") == [] and store.pool_holders("other") == []
    assert step_events(store, fence[0]) == [] and store.run_steps(fence[0]) == []


def test_a_paused_pool_makes_steps_wait_not_fail(store, job):
    store.set_pool_limit("api", 0, 300)
    fence = claim(store, job)
    refused = store.acquire_slots(fence, "w1", SlotRequest("call", pool_needs({"api": 1}), {}))
    assert not refused.granted and [(u.name, u.used, u.limit) for u in refused.blocking] == [("api", 0, 0)]
    store.set_pool_limit("api", 1, 300)
    assert store.acquire_slots(fence, "w1", SlotRequest("call", pool_needs({"api": 1}), {})).granted


def test_an_unconfigured_pool_is_unlimited_and_says_so_once_per_run(store, job):
    fence = claim(store, job)
    for index in range(3):
        assert store.acquire_slots(fence, "w1", SlotRequest(f"s[{index}]", pool_needs({"warehouse": 7}), {})).granted
    [status] = store.pools()
    assert (status.name, status.limit, status.claimed, status.configured) == ("warehouse", None, 21, False)
    unconfigured = [e for e in store.run_events(fence[0]) if e.type == "PoolUnconfigured"]
    assert [(e.step_key, e.metadata["pool"]) for e in unconfigured] == [("s[0]", "warehouse")]


def test_renewal_extends_each_pool_holder_by_its_own_lease(store, job, clock):
    store.set_pool_limit("short", 1, 2)
    store.set_pool_limit("long", 1, 600)
    fence = claim(store, job)
    claimed = time.monotonic()
    grant = store.acquire_slots(fence, "w1", SlotRequest("s", pool_needs({"short": 1, "long": 1}), {}))
    assert grant.granted and grant.lease_seconds == 2
    before = {h.scope: h.expires_at for name in ("short", "long") for h in store.pool_holders(name)}
    clock.advance(0.05)
    assert store.renew_slots(fence, "s")
    taken = 0.05 + time.monotonic() - claimed  # the renewal's lead over the claim, however slow the machine
    after = {h.scope: h for name in ("short", "long") for h in store.pool_holders(name)}
    assert all(after[scope].expires_at > before[scope] for scope in before)
    held = {scope: (holder.expires_at - holder.claimed_at).total_seconds() for scope, holder in after.items()}
    assert 2 < held["pool:short"] <= 2 + taken + 0.1 and 600 < held["pool:long"] <= 600 + taken + 0.1
    assert step_events(store, fence[0]) == ["StepSlotClaimed", "StepSlotRenewed"]
    store.release_slots(fence, "s")
    assert not store.renew_slots(fence, "s")


def test_the_sweep_frees_every_holder_of_a_step_whose_lease_expired(store, job, clock):
    store.set_pool_limit("a", 1, 5)
    store.set_pool_limit("b", 1, 300)
    fence, other = claim(store, job), claim(store, job)
    assert store.acquire_slots(fence, "w1", SlotRequest("crashed", pool_needs({"a": 1, "b": 1}), {})).granted
    # As a crash leaves them: the step stopped renewing and only one of its pools has lapsed so far
    # (the runs' leases, 30 s, still hold).
    clock.advance(6)
    assert not store.acquire_slots(other, "w1", SlotRequest("next", pool_needs({"b": 1}), {})).granted
    report = store.sweep("sweeper", 0.05)
    assert report.step_slots_expired == 2 and report.requeued == [] and report.leaks_repaired == 0
    assert usage(store) == {"a": 0, "b": 0}
    [released] = [e for e in store.run_events(fence[0]) if e.type == "StepSlotReleased"]
    assert released.metadata == {"attempt": 1, "pools": {"a": 1, "b": 1}, "reason": "lease expired"}
    assert store.acquire_slots(other, "w1", SlotRequest("next", pool_needs({"b": 1}), {})).granted
    assert not store.renew_slots(fence, "crashed")


def test_a_live_lease_is_not_swept(store, job):
    store.set_pool_limit("a", 1, 300)
    fence = claim(store, job)
    assert store.acquire_slots(fence, "w1", SlotRequest("s", pool_needs({"a": 1}), {})).granted
    report = store.sweep("sweeper", 0.05)
    assert report is not None and report.step_slots_expired == 0
    assert usage(store) == {"a": 1}


def test_a_stale_attempt_changes_nothing(store, job, clock):
    store.set_pool_limit("a", 1, 300)
    handle = job.submit()
    [first] = store.cycle(CycleRequest("A", [QUEUE], [], [], 1, 0.3)).claimed
    stale = first.fence
    assert store.acquire_slots(stale, "A", SlotRequest("s", pool_needs({"a": 1}), {})).granted
    assert store.record_steps(stale, [StepUpdate("m[0]", StepStatus.PENDING, "m", 0)])
    clock.advance(0.35)
    assert handle.id in store.sweep("sweeper", 0.05).requeued
    assert usage(store) == {"a": 0}  # the run's end released its step holders (defence in depth)
    [second] = store.cycle(CycleRequest("B", [QUEUE], [], [], 1, 30)).claimed
    current = second.fence
    assert current == (handle.id, 2)
    assert store.acquire_slots(current, "B", SlotRequest("s", pool_needs({"a": 1}), {})).granted
    events_before = store.run_events(handle.id)
    steps_before = store.run_steps(handle.id)

    assert store.acquire_slots(stale, "A", SlotRequest("s", pool_needs({"a": 1}), {})).fenced_out
    assert store.acquire_slots(stale, "A", SlotRequest("t", pool_needs({"a": 1}), {})).fenced_out
    store.release_slots(stale, "s")
    assert not store.renew_slots(stale, "s")
    assert not store.record_steps(stale, [StepUpdate("s", StepStatus.COMPLETED, output=1)])
    assert store.next_map_item(stale, "A", "m", 5) is None

    assert store.run_events(handle.id) == events_before
    assert store.run_steps(handle.id) == steps_before
    [holder] = store.pool_holders("a")
    assert (holder.attempt, holder.worker_id) == (2, "B")


def test_record_steps_checkpoints_and_events(store, job):
    fence = claim(store, job)
    assert store.record_steps(fence, [StepUpdate("extract", StepStatus.RUNNING)])
    assert store.record_steps(fence, [StepUpdate("extract", StepStatus.COMPLETED, output={"rows": [1, 2]})])
    assert store.record_steps(fence, [StepUpdate("load", StepStatus.RUNNING)])
    assert store.record_steps(fence, [StepUpdate("load", StepStatus.FAILED, error="ValueError: bad")])
    # a completed step is a checkpoint: recording it again changes nothing
    assert store.record_steps(fence, [StepUpdate("extract", StepStatus.PENDING)])
    extract, load = store.run_steps(fence[0])
    assert (extract.step_key, extract.status, extract.output, extract.attempt) == (
        "extract",
        StepStatus.COMPLETED,
        {"rows": [1, 2]},
        1,
    )
    assert extract.started_at is not None and extract.finished_at >= extract.started_at
    assert (load.status, load.error) == (StepStatus.FAILED, "ValueError: bad")
    assert step_events(store, fence[0]) == ["StepStarted", "StepCompleted", "StepStarted", "StepFailed"]
    failed = next(e for e in store.run_events(fence[0]) if e.type == "StepFailed")
    assert failed.metadata == {"attempt": 1, "error": "ValueError: bad"}


def test_a_finished_step_frees_what_it_still_holds(store, job):
    store.set_pool_limit("a", 1, 300)
    fence = claim(store, job)
    assert store.acquire_slots(fence, "w1", SlotRequest("s", pool_needs({"a": 1}), {})).granted
    assert store.record_steps(fence, [StepUpdate("s", StepStatus.COMPLETED, output=None)])
    assert usage(store) == {"a": 0}
    assert step_events(store, fence[0]) == ["StepSlotClaimed", "StepSlotReleased", "StepCompleted"]


def test_map_items_fill_a_sliding_window_in_index_order(store, job):
    fence = claim(store, job)
    items = [StepUpdate(f"f[{i}]", StepStatus.PENDING, "f", i) for i in range(5)]
    assert store.record_steps(fence, items)
    assert step_events(store, fence[0]) == []  # recorded up front, silently
    taken = [store.next_map_item(fence, "w1", "f", 3) for _ in range(3)]
    assert [item.step_key for item in taken] == ["f[0]", "f[1]", "f[2]"]
    assert all(item.status is StepStatus.RUNNING and item.item_index == int(item.step_key[2]) for item in taken)
    assert store.next_map_item(fence, "w1", "f", 3) is None  # the window is full
    assert store.acquire_slots(
        fence, "w1", SlotRequest("f[1]", pool_needs({"p": 1}), {})
    ).granted  # an item claims its pools too
    assert store.record_steps(fence, [StepUpdate("f[1]", StepStatus.COMPLETED, "f", 1, output=1)])
    assert store.next_map_item(fence, "w1", "f", 3).step_key == "f[3]"
    assert store.next_map_item(fence, "w1", "f", 3) is None
    for key, index in (("f[0]", 0), ("f[2]", 2), ("f[3]", 3)):
        store.record_steps(fence, [StepUpdate(key, StepStatus.COMPLETED, "f", index, output=index)])
    assert store.next_map_item(fence, "w1", "f", 3).step_key == "f[4]"
    store.record_steps(fence, [StepUpdate("f[4]", StepStatus.COMPLETED, "f", 4, output=4)])
    assert store.next_map_item(fence, "w1", "f", 3) is None
    assert store.pool_holders("p") == []
    assert [s.output for s in store.run_steps(fence[0])] == [0, 1, 2, 3, 4]


def test_a_recovered_run_takes_again_the_items_its_dead_attempt_had_taken(store, job, clock):
    handle = job.submit()
    [first] = store.cycle(CycleRequest("A", [QUEUE], [], [], 1, 0.3)).claimed
    store.record_steps(first.fence, [StepUpdate(f"f[{i}]", StepStatus.PENDING, "f", i) for i in range(4)])
    for _ in range(2):
        store.next_map_item(first.fence, "A", "f", 2)
    store.record_steps(first.fence, [StepUpdate("f[0]", StepStatus.COMPLETED, "f", 0, output=0)])
    clock.advance(0.35)
    assert handle.id in store.sweep("sweeper", 0.05).requeued
    [second] = store.cycle(CycleRequest("B", [QUEUE], [], [], 1, 30)).claimed
    # re-recording the items up front keeps the checkpoint of f[0]
    store.record_steps(second.fence, [StepUpdate(f"f[{i}]", StepStatus.PENDING, "f", i) for i in range(4)])
    taken = [store.next_map_item(second.fence, "B", "f", 2) for _ in range(3)]
    assert [item.step_key if item else None for item in taken] == ["f[1]", "f[2]", None]
    assert all(item.attempt == 2 for item in taken if item)
    [done] = [s for s in store.run_steps(handle.id) if s.step_key == "f[0]"]
    assert (done.status, done.output, done.attempt) == (StepStatus.COMPLETED, 0, 1)


def test_window_slots_share_the_run_lease(store, job):
    fence = claim(store, job, lease=30)
    store.record_steps(fence, [StepUpdate("f[0]", StepStatus.PENDING, "f", 0)])
    store.next_map_item(fence, "w1", "f", 1)
    [holder] = store.scope_holders(fanout_scope(fence[0], "f"))
    run = store.get_run(fence[0])
    assert holder.expires_at == run.lease_expires_at
    assert store.renew_leases("w1", [fence], 60) == []
    [holder] = store.scope_holders(fanout_scope(fence[0], "f"))
    assert holder.expires_at == store.get_run(fence[0]).lease_expires_at


def test_the_run_lease_renewal_leaves_pool_leases_alone(store, job):
    store.set_pool_limit("a", 1, 600)
    fence = claim(store, job, lease=30)
    assert store.acquire_slots(fence, "w1", SlotRequest("s", pool_needs({"a": 1}), {})).granted
    store.renew_leases("w1", [fence], 5)
    [holder] = store.pool_holders("a")
    assert (holder.expires_at - holder.claimed_at).total_seconds() > 500


def test_the_end_of_a_run_frees_its_step_slots_and_waiters_of_dead_attempts_are_not_pending(store, job):
    store.set_pool_limit("a", 1, 300)
    first, second = claim(store, job), claim(store, job)
    assert store.acquire_slots(first, "w1", SlotRequest("s", pool_needs({"a": 1}), {})).granted
    assert not store.acquire_slots(second, "w1", SlotRequest("s", pool_needs({"a": 1}), {})).granted
    assert [(p.claimed, p.pending) for p in store.pools()] == [(1, 1)]
    store.cycle(CycleRequest("w1", [QUEUE], [], [Outcome(first[0], first[1], OutcomeKind.COMPLETED)], 0, 30))
    store.cycle(CycleRequest("w1", [QUEUE], [], [Outcome(second[0], second[1], OutcomeKind.FAILED, error="x")], 0, 30))
    assert [(p.claimed, p.pending) for p in store.pools()] == [(0, 0)]


def test_fixed_limits_gate_other_scopes(store, job):
    fence = claim(store, job)
    window = fanout_scope(fence[0], "m")
    assert store.acquire_slots(fence, "w1", SlotRequest("m[0]", {window: 1}, {window: 1})).granted
    refused = store.acquire_slots(fence, "w1", SlotRequest("m[1]", {window: 1}, {window: 1}))
    assert [(u.scope, u.used, u.limit) for u in refused.blocking] == [(window, 1, 1)]
    assert refused.lease_seconds is None
