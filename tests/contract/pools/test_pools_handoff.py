"""Slots handed from step to step, and many steps asking at once, through the store port on both adapters.

`acquire_many` answers the steps that queue behind another step of their
run; `finish_step` records a finished step and hands its slots to the run's
next waiter: decided by the store, or already handed over in memory (then
the holder rows move). Driven with explicit fences, so every interleaving is
exact rather than left to timing.
"""

from __future__ import annotations

import pytest

from tidegate import PoolRequestTooLarge
from tidegate.domain.pools import pool_needs
from tidegate.domain.steps import FinishStepRequest, SlotRequest, StepStatus, StepUpdate

from .conftest import claim, step_events, usage

NEEDS = pool_needs({"db": 1})


def ask(key: str, needs: dict[str, int] = NEEDS) -> SlotRequest:
    return SlotRequest(key, needs)


def completed(key: str) -> StepUpdate:
    return StepUpdate(key, StepStatus.COMPLETED, output=key)


def running(key: str) -> StepUpdate:
    return StepUpdate(key, StepStatus.RUNNING)


def holders(store, pool: str = "db") -> list[str]:
    return sorted(holder.step_key for holder in store.pool_holders(pool))


def metadata_of(store, run_id: str, key: str, kind: str) -> dict:
    [event] = [e for e in store.run_events(run_id) if e.step_key == key and e.type == kind]
    return event.metadata


# --- acquire_many -----------------------------------------------------------------------


def test_many_asks_are_judged_in_order_each_seeing_the_grants_before_it(store, job):
    store.set_pool_limit("db", 2, 300)
    fence = claim(store, job)
    grants = store.acquire_many(fence, "w1", [ask("s0"), ask("s1"), ask("s2"), ask("s3")])
    assert [grant.granted for grant in grants] == [True, True, False, False]
    assert grants[0].lease_seconds == 300
    assert [(use.name, use.used, use.limit) for use in grants[2].blocking] == [("db", 2, 2)]
    assert holders(store) == ["s0", "s1"]
    assert [(pool.claimed, pool.pending) for pool in store.pools()] == [(2, 2)]
    assert metadata_of(store, fence[0], "s3", "StepSlotWaiting")["blocked_by"] == [
        {"pool": "db", "claimed": 2, "limit": 2, "slots": 1}
    ]
    # asked again, a step waiting already is not announced twice
    assert not store.acquire_many(fence, "w1", [ask("s3")])[0].granted
    assert step_events(store, fence[0], "s3") == ["StepSlotWaiting"]


def test_a_hopeless_ask_among_many_is_refused_without_a_trace(store, job):
    store.set_pool_limit("db", 1, 300)
    fence = claim(store, job)
    grants = store.acquire_many(fence, "w1", [ask("big", pool_needs({"db": 2})), ask("small")])
    assert [grant.granted for grant in grants] == [False, True]
    assert step_events(store, fence[0], "big") == []
    with pytest.raises(PoolRequestTooLarge):
        store.acquire_many(fence, "w1", [ask("big", pool_needs({"db": 2}))], strict=True)
    assert holders(store) == ["small"] and step_events(store, fence[0], "big") == []


def test_many_asks_of_a_stale_attempt_are_refused(store, job):
    store.set_pool_limit("db", 1, 300)
    fence = claim(store, job)
    assert store.acquire_many((fence[0], fence[1] + 1), "w1", [ask("s0")]) is None
    assert holders(store) == [] and step_events(store, fence[0]) == []


# --- finish_step: the store decides ---------------------------------------------------------


def test_a_finished_step_hands_its_slot_to_the_next_waiter_of_its_run(store, job):
    store.set_pool_limit("db", 1, 300)
    fence = claim(store, job)
    assert store.acquire_slots(fence, "w1", SlotRequest("a", NEEDS, {})).granted
    assert not store.acquire_slots(fence, "w1", SlotRequest("b", NEEDS, {})).granted
    finish = store.finish_step(FinishStepRequest(fence, "w1", completed("a"), ask("b")))
    assert finish.recorded and finish.handed is not None and finish.handed.granted
    assert finish.handed.lease_seconds == 300 and finish.full and not finish.shared
    assert holders(store) == ["b"]
    assert [(pool.claimed, pool.pending) for pool in store.pools()] == [(1, 0)]
    assert step_events(store, fence[0], "a") == ["StepSlotClaimed", "StepSlotReleased", "StepCompleted"]
    assert step_events(store, fence[0], "b") == ["StepSlotWaiting", "StepSlotClaimed"]
    steps = {step.step_key: step for step in store.run_steps(fence[0])}
    assert steps["a"].status is StepStatus.COMPLETED and steps["a"].output == "a"


def test_a_successor_that_no_longer_waits_is_handed_nothing(store, job):
    store.set_pool_limit("db", 2, 300)
    fence = claim(store, job)
    assert store.acquire_slots(fence, "w1", SlotRequest("a", NEEDS, {})).granted
    # b took a slot by its own try and finished while a's finish was on its way
    assert store.acquire_slots(fence, "w1", SlotRequest("b", NEEDS, {})).granted
    assert store.finish_step(FinishStepRequest(fence, "w1", completed("b"))).recorded
    finish = store.finish_step(FinishStepRequest(fence, "w1", completed("a"), ask("b")))
    assert finish.recorded and finish.handed is None
    assert holders(store) == [] and step_events(store, fence[0], "b").count("StepSlotClaimed") == 1


def test_slots_are_freed_for_everyone_when_another_run_waits_for_them(store, job):
    store.set_pool_limit("db", 1, 300)
    mine, theirs = claim(store, job), claim(store, job)
    assert store.acquire_slots(mine, "w1", SlotRequest("a", NEEDS, {})).granted
    assert not store.acquire_slots(mine, "w1", SlotRequest("b", NEEDS, {})).granted
    assert not store.acquire_slots(theirs, "w1", SlotRequest("x", NEEDS, {})).granted
    finish = store.finish_step(FinishStepRequest(mine, "w1", completed("a"), ask("b")))
    assert finish.recorded and finish.handed is None and finish.shared
    assert holders(store) == [] and usage(store) == {"db": 0}
    # the waiter of the other run takes it like any claimer
    assert store.acquire_slots(theirs, "w1", SlotRequest("x", NEEDS, {})).granted


def test_a_lowered_limit_is_not_handed_past(store, job):
    store.set_pool_limit("db", 2, 300)
    fence = claim(store, job)
    assert all(grant.granted for grant in store.acquire_many(fence, "w1", [ask("a"), ask("a2")]))
    assert not store.acquire_slots(fence, "w1", SlotRequest("b", NEEDS, {})).granted
    store.set_pool_limit("db", 1, 300)
    finish = store.finish_step(FinishStepRequest(fence, "w1", completed("a"), ask("b")))
    assert finish.recorded and finish.handed is None
    assert holders(store) == ["a2"]


def test_a_finish_without_a_successor_frees_and_records(store, job):
    store.set_pool_limit("db", 1, 300)
    fence = claim(store, job)
    assert store.acquire_slots(fence, "w1", SlotRequest("a", NEEDS, {})).granted
    finish = store.finish_step(
        FinishStepRequest(fence, "w1", StepUpdate("a", StepStatus.FAILED, error="ValueError: x"))
    )
    assert finish.recorded and finish.handed is None
    assert holders(store) == []
    assert step_events(store, fence[0], "a") == ["StepSlotClaimed", "StepSlotReleased", "StepFailed"]


# --- finish_step: handed over in memory ----------------------------------------------------


def test_slots_handed_over_in_memory_move_to_the_successor_which_is_recorded_running(store, job):
    store.set_pool_limit("db", 1, 300)
    fence = claim(store, job)
    assert store.acquire_slots(fence, "w1", SlotRequest("a", NEEDS, {})).granted
    assert not store.acquire_slots(fence, "w1", SlotRequest("b", NEEDS, {})).granted
    [before] = store.pool_holders("db")
    finish = store.finish_step(FinishStepRequest(fence, "w2", completed("a"), ask("b"), running("b")))
    assert finish.recorded and finish.handed is not None and finish.handed.lease_seconds == 300
    assert finish.full and not finish.shared
    [after] = store.pool_holders("db")
    assert (after.step_key, after.slots, after.worker_id) == ("b", 1, "w2")
    assert after.claimed_at >= before.claimed_at and 299 < (after.expires_at - after.claimed_at).total_seconds() < 301
    assert [(pool.claimed, pool.pending) for pool in store.pools()] == [(1, 0)]
    assert step_events(store, fence[0], "a") == ["StepSlotClaimed", "StepSlotReleased", "StepCompleted"]
    assert step_events(store, fence[0], "b") == ["StepSlotWaiting", "StepSlotClaimed", "StepStarted"]
    assert metadata_of(store, fence[0], "a", "StepSlotReleased") == {
        "attempt": 1,
        "pools": {"db": 1},
        "reason": "handed to b",
    }
    assert metadata_of(store, fence[0], "b", "StepSlotClaimed") == {
        "attempt": 1,
        "pools": {"db": 1},
        "handed_from": "a",
    }
    steps = {step.step_key: step for step in store.run_steps(fence[0])}
    assert steps["b"].status is StepStatus.RUNNING and steps["b"].waiting_for is None
    assert steps["b"].started_at is not None
    # the successor's own finish frees the slot as usual
    assert store.finish_step(FinishStepRequest(fence, "w2", completed("b"))).recorded
    assert holders(store) == []


def test_a_hand_over_says_when_another_run_started_waiting(store, job):
    store.set_pool_limit("db", 1, 300)
    mine, theirs = claim(store, job), claim(store, job)
    assert store.acquire_slots(mine, "w1", SlotRequest("a", NEEDS, {})).granted
    assert not store.acquire_slots(theirs, "w1", SlotRequest("x", NEEDS, {})).granted
    finish = store.finish_step(FinishStepRequest(mine, "w1", completed("a"), ask("b"), running("b")))
    assert finish.handed is not None and finish.shared  # the run stops handing on from now
    assert holders(store) == ["b"]


def test_a_hand_over_of_slots_the_step_no_longer_held_grants_nothing(store, job):
    store.set_pool_limit("db", 1, 300)
    fence = claim(store, job)
    assert store.acquire_slots(fence, "w1", SlotRequest("a", NEEDS, {})).granted
    store.release_slots(fence, "a")  # as the sweep does when a lease expires
    assert store.acquire_slots(fence, "w1", SlotRequest("c", NEEDS, {})).granted
    finish = store.finish_step(FinishStepRequest(fence, "w1", completed("a"), ask("b"), running("b")))
    assert finish.recorded and finish.handed is None
    assert holders(store) == ["c"]


def test_a_hand_over_to_a_step_that_took_its_own_slot_moves_nothing(store, job):
    store.set_pool_limit("db", 2, 300)
    fence = claim(store, job)
    assert store.acquire_slots(fence, "w1", SlotRequest("a", NEEDS, {})).granted
    assert store.acquire_slots(fence, "w1", SlotRequest("b", NEEDS, {})).granted  # its own try won a free slot
    finish = store.finish_step(FinishStepRequest(fence, "w1", completed("a"), ask("b"), running("b")))
    assert finish.handed is not None and finish.handed.granted
    assert holders(store) == ["b"] and usage(store) == {"db": 1}


def test_a_hand_over_by_a_stale_attempt_changes_nothing(store, job):
    store.set_pool_limit("db", 1, 300)
    fence = claim(store, job)
    assert store.acquire_slots(fence, "w1", SlotRequest("a", NEEDS, {})).granted
    events, steps = store.run_events(fence[0]), store.run_steps(fence[0])
    stale = (fence[0], fence[1] + 1)
    assert not store.finish_step(FinishStepRequest(stale, "w1", completed("a"), ask("b"), running("b"))).recorded
    assert not store.finish_step(FinishStepRequest(stale, "w1", completed("a"), ask("b"))).recorded
    assert not store.finish_step(FinishStepRequest(stale, "w1", completed("a"))).recorded
    assert store.run_events(fence[0]) == events and store.run_steps(fence[0]) == steps
    assert holders(store) == ["a"]
