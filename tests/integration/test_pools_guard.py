"""The PoolGuard on both adapters: wake-ups, timeout, over-limit, renewal, release, fencing."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from tests.support.pool_guard import acquire_sync, holding
from tidegate import PoolClaimTimeout, PoolRequestTooLarge
from tidegate.domain.errors import StepFencedOut
from tidegate.domain.model import CycleRequest
from tidegate.domain.pools import pool_needs
from tidegate.domain.steps import SlotRequest
from tidegate.engine.runtime.pools import ClaimPolicy, PoolGuard

from .conftest import wait_until

QUEUE = "guarded"
# Only a wake-up ends a wait before its poll: the waits below give up (fail) long before it.
SLOW_POLL = ClaimPolicy(timeout=3600, poll_interval=1800, poll_jitter=0)
WOKEN_WITHIN = 60.0  # seconds: generous for a stalled machine, and far below SLOW_POLL's poll


@pytest.fixture
def job(app):
    @app.task(name="t.guarded", queue=QUEUE, max_attempts=3)
    def guarded() -> None:
        return None

    return guarded


def claim(store, job, lease: float = 60.0) -> tuple[str, int]:
    job.submit()
    [run] = store.cycle(CycleRequest("w1", [QUEUE], [], [], 1, lease)).claimed
    return run.fence


@pytest.fixture
def guard(app):
    guards: list[PoolGuard] = []

    def make(policy: ClaimPolicy = SLOW_POLL) -> PoolGuard:
        guards.append(PoolGuard(app.store, policy))
        return guards[-1]

    yield make
    for made in guards:
        made.close()


def test_a_release_wakes_a_waiting_guard_long_before_its_poll(app, job, guard):
    store = app.store
    store.set_pool_limit("db", 1, 300)
    holder, waiter = claim(store, job), claim(store, job)
    first = acquire_sync(guard(), holder, "w1", "first", pool_needs({"db": 1}))
    got: list[str] = []

    def wait() -> None:
        claim_ = acquire_sync(guard(), waiter, "w1", "second", pool_needs({"db": 1}))
        got.append("second holds")
        guard_for_release.release(claim_)

    guard_for_release = guard()
    thread = threading.Thread(target=wait, daemon=True)  # were it never woken, it must not hold the process
    thread.start()
    wait_until(lambda: "StepSlotWaiting" in [e.type for e in store.run_events(waiter[0])], 30)
    guard_for_release.release(first)
    thread.join(WOKEN_WITHIN)
    assert got == ["second holds"], "the release did not wake the waiting guard (its poll is half an hour away)"


def test_the_async_form_waits_on_the_loop_and_is_woken_too(app, job, guard):
    store = app.store
    store.set_pool_limit("db", 1, 300)
    holder, waiter = claim(store, job), claim(store, job)
    the_guard = guard()

    async def scenario() -> list[str]:
        order: list[str] = []
        first = await the_guard.acquire(holder, "w1", "first", pool_needs({"db": 1}))

        async def second() -> None:
            async with the_guard.holding_async(waiter, "w1", "second", pool_needs({"db": 1})):
                order.append("second holds")

        task = asyncio.create_task(second())
        # the store's events are the only sign that it waits: a bounded poll, off the loop
        await asyncio.to_thread(
            wait_until,
            lambda: "StepSlotWaiting" in [e.type for e in store.run_events(waiter[0])],
            30,
            message="the second step to wait",
        )
        order.append("first releases")
        await the_guard.release_async(first)
        await asyncio.wait_for(task, WOKEN_WITHIN)  # only the wake-up: the poll is half an hour away
        return order

    assert asyncio.run(scenario()) == ["first releases", "second holds"]
    assert [p.claimed for p in store.pools()] == [0]


def test_a_claim_timeout_fails_clearly_and_names_the_full_pools(app, job, guard):
    store = app.store
    store.set_pool_limit("db", 2, 300)
    store.set_pool_limit("api", 3, 300)
    holder, waiter = claim(store, job), claim(store, job)
    assert store.acquire_slots(holder, "w1", SlotRequest("hog", pool_needs({"db": 2}), {})).granted
    started = time.monotonic()
    with pytest.raises(PoolClaimTimeout) as caught:
        acquire_sync(
            guard(ClaimPolicy(timeout=0.3, poll_interval=0.05, poll_jitter=0.01)),
            waiter,
            "w1",
            "query[2]",
            pool_needs({"db": 1, "api": 1}),
        )
    assert time.monotonic() - started >= 0.3  # it waited its timeout out (a stall only makes this longer)
    message = str(caught.value)
    assert "step query[2] gave up waiting for pool slots after 300ms (TIDEGATE_CLAIM_TIMEOUT)" in message
    assert "pool 'db' (2/2 claimed)" in message and "api" not in message
    assert store.pool_holders("api") == []  # all or none: nothing of api was kept


def test_an_over_limit_request_fails_at_once(app, job, guard):
    app.store.set_pool_limit("gpu", 1, 300)
    fence = claim(app.store, job)
    with pytest.raises(PoolRequestTooLarge, match="limit is 1"):
        acquire_sync(guard(), fence, "w1", "train", pool_needs({"gpu": 2}))
    # At once: it never waited (a wait is recorded, and SLOW_POLL's would end in PoolClaimTimeout).
    assert "StepSlotWaiting" not in [e.type for e in app.store.run_events(fence[0])]


def test_renewal_keeps_a_long_step_slots_past_the_lease(app, job, guard):
    store = app.store
    store.set_pool_limit("db", 1, 1.5)  # renewed every 0.5 s: a loaded machine may be late, not 1.5 s late
    fence, other = claim(store, job), claim(store, job)
    with holding(guard(), fence, "w1", "long", pool_needs({"db": 1})) as held:
        deadline = time.monotonic() + 4.5  # three leases
        while time.monotonic() < deadline:
            store.sweep("sweeper", 0.05)
            time.sleep(0.1)
        assert not held.lost.is_set()
        assert [h.step_key for h in store.pool_holders("db")] == ["long"]
        assert not store.acquire_slots(other, "w1", SlotRequest("other", pool_needs({"db": 1}), {})).granted
    renewals = [e for e in store.run_events(fence[0]) if e.type == "StepSlotRenewed"]
    assert len(renewals) >= 3
    assert store.pool_holders("db") == []  # released on exit


def test_without_renewal_the_sweep_takes_the_slots_back_and_the_guard_sees_it_lost(app, job, guard, clock):
    store = app.store
    store.set_pool_limit("db", 1, 0.3)
    fence = claim(store, job)
    assert store.acquire_slots(
        fence, "w1", SlotRequest("crashed", pool_needs({"db": 1}), {})
    ).granted  # no guard: nobody renews
    clock.advance(0.4)
    report = store.sweep("sweeper", 0.05)
    assert report.step_slots_expired == 1 and store.pool_holders("db") == []


def test_the_context_manager_releases_on_error(app, job, guard):
    store = app.store
    store.set_pool_limit("db", 1, 300)
    fence = claim(store, job)
    with pytest.raises(RuntimeError, match="boom"), holding(guard(), fence, "w1", "s", pool_needs({"db": 1})):
        raise RuntimeError("boom")
    assert store.pool_holders("db") == []


def test_a_taken_over_attempt_cannot_acquire(app, job, guard, clock):
    store = app.store
    handle = job.submit()
    [run] = store.cycle(CycleRequest("w1", [QUEUE], [], [], 1, 0.3)).claimed
    clock.advance(0.35)
    assert handle.id in store.sweep("sweeper", 0.05).requeued
    with pytest.raises(StepFencedOut, match="was taken over"):
        acquire_sync(guard(), run.fence, "w1", "s", pool_needs({"db": 1}))
    assert store.pools() == []


def test_a_cancelled_async_acquire_leaves_no_slot_behind(app, job, guard):
    store = app.store
    store.set_pool_limit("db", 1, 300)
    fence = claim(store, job)
    the_guard = guard()

    async def scenario() -> None:
        task = asyncio.create_task(the_guard.acquire(fence, "w1", "s", pool_needs({"db": 1})))
        await asyncio.sleep(0)  # the claim is on its thread now
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())
    assert store.pool_holders("db") == []


def test_recording_a_step_finished_frees_its_slots_and_the_guard_can_just_forget_them(app, job, guard):
    from tidegate.domain.steps import StepStatus, StepUpdate

    store = app.store
    store.set_pool_limit("db", 1, 0.6)
    fence = claim(store, job)
    the_guard = guard()
    held = acquire_sync(the_guard, fence, "w1", "s", pool_needs({"db": 1}))
    assert store.record_steps(fence, [StepUpdate("s", StepStatus.COMPLETED, output=1)])
    the_guard.forget(held)
    assert store.pool_holders("db") == []
    time.sleep(0.5)  # past a renewal turn: nothing renews a forgotten claim, nothing reports it lost
    assert not held.lost.is_set()
    assert [e.type for e in store.run_events(fence[0]) if e.step_key] == [
        "StepSlotClaimed",
        "StepSlotReleased",
        "StepCompleted",
    ]
