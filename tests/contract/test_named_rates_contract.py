"""Named rates through the Store port on both adapters (issue 25): declared and overridden like
pools, paid by a step with its pool slots in one transaction, all or none, given back when the step
never started.

A rate of 2 per 10s with burst 1 lets one start now and the next 5s later (GCRA, domain/rates.py):
a second request made at once is refused by the rate, and the refusal says when it would fit.
"""

from __future__ import annotations

import time

import pytest

from tidegate import Rate
from tidegate.domain.errors import RateCostTooLarge, RateNotFound
from tidegate.domain.named_rates import label
from tidegate.domain.pools import pool_needs
from tidegate.domain.steps import SlotRequest, StepStatus, StepUpdate
from tidegate.storage.port import Fence

from .conftest import claim, enqueue_one

TWO_PER_10S = (Rate(2, "10s", burst=1),)


def running_fence(store, worker: str = "w1") -> Fence:
    enqueue_one(store)
    [run] = claim(store, worker)
    return run.fence


def rated(step: str, cost: int = 1, pool: str | None = "db", rate: str = "api") -> SlotRequest:
    return SlotRequest(step, pool_needs({pool: 1}) if pool else {}, {}, {rate: cost})


def claimed(store, pool: str = "db") -> int:
    return next((status.claimed for status in store.pools() if status.name == pool), 0)


def test_a_named_rate_is_declared_overridden_reset_and_audited_like_a_pool(store):
    declared = store.declare_named_rate("api", TWO_PER_10S)
    assert (declared.name, label(declared.rates), declared.source) == ("api", "2/10s", "code")
    store.set_named_rate("api", (Rate(5, "1s"), Rate(100, "1m")))
    again = store.declare_named_rate("api", TWO_PER_10S)  # the next import does not undo a live change
    assert (label(again.rates), again.source, label(again.declared or ())) == ("5/1s, 100/1m", "override", "2/10s")
    back = store.reset_named_rate("api")
    assert back is not None and (label(back.rates), back.source) == ("2/10s", "code")
    store.set_named_rate("adhoc", TWO_PER_10S)
    assert store.reset_named_rate("adhoc") is None
    assert [rate.name for rate in store.named_rates()] == ["api"]
    changes = [e.metadata for e in store.events_after(0, 100) if e.type == "LimitChanged"]
    assert [(c["target"], c["old"], c["new"], c["source"]) for c in changes] == [
        ("rate:@api", None, "2/10s", "code"),
        ("rate:@api", "2/10s", "5/1s, 100/1m", "override"),
        ("rate:@api", "5/1s, 100/1m", "2/10s", "code"),
        ("rate:@adhoc", None, "2/10s", "override"),
        ("rate:@adhoc", "2/10s", None, None),
    ]


def test_a_declaration_repeated_by_the_next_import_is_not_audited_again(store):
    store.declare_named_rate("api", (Rate(30, "1m", burst=2),))
    store.declare_named_rate("api", (Rate(30, "1m", burst=2),))  # read back as 60 seconds: the same windows
    store.declare_named_rate("api", (Rate(30, 60, burst=2),))
    changes = [e.metadata for e in store.events_after(0, 100) if e.type == "LimitChanged"]
    assert [(c["target"], c["old"], c["new"]) for c in changes] == [("rate:@api", None, "30/1m")]


def test_a_step_held_back_by_its_rate_takes_no_pool_slot_and_is_told_when(store):
    store.set_pool_limit("db", 5, 300)
    store.declare_named_rate("api", TWO_PER_10S)
    first, second = running_fence(store), running_fence(store)
    charged = time.monotonic()
    assert store.acquire_slots(first, "w1", rated("load")).granted
    assert claimed(store) == 1

    refused = store.acquire_slots(second, "w1", rated("load"))
    taken = time.monotonic() - charged  # the retry is 5 s from the charge, less this (however slow the machine)
    assert not refused.granted and not refused.blocking  # the pool had room: the rate refused
    assert refused.rate_wait is not None and refused.rate_wait.rate == "api"
    assert 5.0 - taken - 0.1 <= refused.rate_wait.retry_in <= 5.0
    assert claimed(store) == 1  # all or none: no slot taken for the refused step
    [waiting] = [step for step in store.run_steps(second[0]) if step.step_key == "load"]
    assert waiting.waiting_for == {"pool:db": 1, "rate:@api": 1}
    assert [rate.waiting for rate in store.named_rates()] == [1]
    [event] = [e for e in store.run_events(second[0]) if e.type == "StepSlotWaiting"]
    assert event.metadata["blocked_by"][0]["rate"] == "api"


@pytest.mark.advances_clock
def test_the_rate_allows_the_step_at_the_time_it_said(store, clock):
    store.declare_named_rate("api", TWO_PER_10S)
    first, second = running_fence(store), running_fence(store)
    assert store.acquire_slots(first, "w1", rated("load", pool=None)).granted
    wait = store.acquire_slots(second, "w1", rated("load", pool=None)).rate_wait
    assert wait is not None
    clock.advance(wait.retry_in - 0.5)
    assert not store.acquire_slots(second, "w1", rated("load", pool=None)).granted
    clock.advance(0.6)
    assert store.acquire_slots(second, "w1", rated("load", pool=None)).granted


def test_every_window_of_every_rate_must_allow_the_start(store):
    store.declare_named_rate("api", (Rate(100, "1s"), Rate(1, "1h")))
    store.declare_named_rate("other", (Rate(100, "1s"),))
    first, second = running_fence(store), running_fence(store)
    both = SlotRequest("load", {}, {}, {"api": 1, "other": 1})
    assert store.acquire_slots(first, "w1", both).granted
    refused = store.acquire_slots(second, "w1", both)
    assert refused.rate_wait is not None and refused.rate_wait.rate == "api" and refused.rate_wait.retry_in > 3000
    # nothing of `other` was taken for the refused step: one more start of it alone still fits at once
    for n in range(4):
        assert store.acquire_slots(second, "w1", SlotRequest(f"alone{n}", {}, {}, {"other": 1})).granted


def test_an_unknown_rate_or_a_cost_above_the_burst_is_refused_and_nothing_is_stored(store):
    store.set_pool_limit("db", 5, 300)
    store.declare_named_rate("api", TWO_PER_10S)
    fence = running_fence(store)
    with pytest.raises(RateNotFound, match="'nope' is not declared"):
        store.acquire_slots(fence, "w1", rated("load", rate="nope"))
    with pytest.raises(RateCostTooLarge, match="burst is 1"):
        store.acquire_slots(fence, "w1", rated("load", cost=2))
    assert claimed(store) == 0 and store.pool_holders("db") == []
    assert store.acquire_slots(fence, "w1", rated("other")).granted  # the rate's budget is untouched


def test_a_step_released_before_it_started_gives_its_tokens_back(store):
    store.declare_named_rate("api", TWO_PER_10S)
    store.set_pool_limit("db", 5, 300)
    first, second = running_fence(store), running_fence(store)
    assert store.acquire_slots(first, "w1", rated("load")).granted
    store.release_slots(first, "load")  # e.g. cancelled before its function started
    assert claimed(store) == 0
    assert store.acquire_slots(second, "w1", rated("load")).granted  # the refunded token


def test_a_step_that_started_keeps_its_charge_when_released(store):
    store.declare_named_rate("api", TWO_PER_10S)
    first, second = running_fence(store), running_fence(store)
    assert store.acquire_slots(first, "w1", rated("load", pool=None)).granted
    assert store.record_steps(first, [StepUpdate("load", StepStatus.RUNNING)])
    store.release_slots(first, "load")
    assert not store.acquire_slots(second, "w1", rated("load", pool=None)).granted


def test_a_batch_charges_its_requests_in_order(store):
    store.set_pool_limit("db", 5, 300)
    store.declare_named_rate("api", TWO_PER_10S)
    fence = running_fence(store)
    grants = store.acquire_many(fence, "w1", [rated("a"), rated("b")])
    assert grants is not None and [grant.granted for grant in grants] == [True, False]
    assert grants[1].rate_wait is not None and claimed(store) == 1


def test_a_finished_step_hands_its_slots_on_only_with_the_successors_tokens(store):
    store.set_pool_limit("db", 1, 300)
    store.declare_named_rate("api", TWO_PER_10S)
    fence = running_fence(store)
    assert store.acquire_slots(fence, "w1", rated("a")).granted
    assert not store.acquire_slots(fence, "w1", rated("b")).granted  # waits for the pool
    from tidegate.domain.steps import FinishStepRequest

    finish = store.finish_step(
        FinishStepRequest(fence, "w1", StepUpdate("a", StepStatus.COMPLETED, output=1), rated("b"))
    )
    assert finish.recorded and finish.handed is None  # the rate refused b: nothing handed over
    assert claimed(store) == 0  # the slot was freed for everyone, not kept for a step that cannot start
