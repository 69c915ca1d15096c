"""No futile claims (issue 16, lever 3): `more` only when the window cut a claim short, and a
woken worker's cheap look (`peek_cycle`) before it claims.

Same expectations on both adapters. Counts are exact: claims are explicit
cycles under made-up worker ids. The last test is a forced interleaving of a
real worker's look and another worker's free: the look sees the slot taken,
the free commits and its wake-up arrives while the look is held, and only then
does the look answer "closed". The worker must still claim the run the free
let in, with an hour-long poll: a lost wake-up would leave it waiting.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest

from tests.conftest import wait_until
from tests.races import TIMEOUT
from tidegate import Concurrency, Partition, RunQueueConfig, RunStatus
from tidegate.bootstrap import open_store
from tidegate.domain.limits import QueueConfig
from tidegate.domain.model import CycleRequest
from tidegate.storage.port import Store

from .conftest import QUEUE, claim, completed, enqueue_one

PARTITIONED = QueueConfig(QUEUE, Concurrency(global_limit=1, partition=Partition(by_args=["p"])))
WINDOW_OF_TWO = 10  # a claim of 2 on a limited queue reads 2 + MIN_MARGIN rows (domain/claim_plan.py)


def fill(store: Store, count: int, **options) -> list[str]:
    return [enqueue_one(store, **options) for _ in range(count)]


# --- more: claim again at once only when the window, not a limit, cut the claim short -----------


def test_a_claim_that_fills_the_global_cap_does_not_ask_to_claim_again(store):
    """The window came back full and the claim short, but every run needs the full global cap."""
    store.register_limits(RunQueueConfig(max_concurrent_runs=1), [], [])
    fill(store, WINDOW_OF_TWO + 5)
    result = store.cycle(CycleRequest("w1", [QUEUE], [], [], 2, 30))
    assert len(result.claimed) == 1
    assert result.more is False
    assert store.cycle(CycleRequest("w1", [QUEUE], [], [], 1, 30)).claimed == []  # and indeed nothing more


def test_a_claim_cut_short_by_the_window_asks_to_claim_again(store):
    """Partition a fills the window and only one of it can run: b's run lies past the window."""
    store.register_limits(None, [PARTITIONED], [])
    fill(store, WINDOW_OF_TWO, partition="p=a", args={"p": "a"})
    [other] = fill(store, 1, partition="p=b", args={"p": "b"})
    result = store.cycle(CycleRequest("w1", [QUEUE], [], [], 2, 30))
    assert len(result.claimed) == 1 and result.more is True
    assert [run.id for run in claim(store, "w1", limit=1)] == [other]


def test_a_full_queue_limit_still_asks_to_claim_again_past_the_window(store):
    """A run with a concurrency key has a scope of its own: the queue's full limit binds only the
    runs without one, and the claim did not read whether any keyed run lies past its window."""
    store.register_limits(None, [QueueConfig(QUEUE, Concurrency(global_limit=1))], [])
    fill(store, WINDOW_OF_TWO)
    [keyed] = fill(store, 1, partition="key=x", concurrency_key="x")
    result = store.cycle(CycleRequest("w1", [QUEUE], [], [], 2, 30))
    assert len(result.claimed) == 1 and result.more is True
    assert [run.id for run in claim(store, "w1", limit=1)] == [keyed]


# --- peek_cycle: a woken worker's look before it claims ---------------------------------------


def test_no_look_where_no_limit_can_close_the_queue(store):
    fill(store, 2)
    assert store.peek_cycle("w1", [QUEUE]) is None
    store.register_limits(None, [PARTITIONED], [])
    claim(store, "w1", limit=1)
    assert store.peek_cycle("w2", [QUEUE]) is None  # a partitioned limit proves nothing for the others


def test_a_full_global_cap_answers_without_claiming_and_still_reports_cancels(store):
    store.register_limits(RunQueueConfig(max_concurrent_runs=1), [], [])
    fill(store, 3)
    [held] = claim(store, "w1", limit=2)
    peeked = store.peek_cycle("w2", [QUEUE, "other"])
    assert peeked is not None and peeked.claimed == [] and peeked.more is False
    store.cancel_run(held.id)
    assert store.peek_cycle("w1", [QUEUE]).cancel_requested == [held.fence]
    store.cycle(CycleRequest("w1", [QUEUE], [held.fence], [completed(held.fence)], 0, 30))
    assert store.peek_cycle("w2", [QUEUE]) is None  # the slot is free: claim


def test_a_full_queue_limit_answers_only_while_no_queued_run_has_a_key(store):
    store.register_limits(None, [QueueConfig(QUEUE, Concurrency(global_limit=1))], [])
    fill(store, 2)
    claim(store, "w1", limit=1)
    assert store.peek_cycle("w2", [QUEUE]) is not None
    enqueue_one(store, partition="key=x", concurrency_key="x")
    assert store.peek_cycle("w2", [QUEUE]) is None
    assert len(claim(store, "w2", limit=1)) == 1


def test_a_queue_with_no_queued_run_answers_without_claiming(store):
    """A worker woken after the slot was freed (by another worker's commit, or its own cycle that
    claimed nothing): with its queue empty, a claim would find nothing. A run queued for later
    is still claimed (for its next-due time)."""
    store.register_limits(RunQueueConfig(max_concurrent_runs=1), [], [])
    store.rules()  # cached, as after any claim
    assert store.peek_cycle("w1", [QUEUE]) is not None
    enqueue_one(store, delay=600)
    assert store.peek_cycle("w1", [QUEUE]) is None


def test_a_limit_raised_elsewhere_is_seen_by_the_next_look(store, holder):
    store.register_limits(None, [QueueConfig(QUEUE, Concurrency(global_limit=1))], [])
    fill(store, 2)
    claim(store, "w1", limit=1)
    assert store.peek_cycle("w2", [QUEUE]) is not None
    holder.set_limit(f"queue:{QUEUE}", 2)
    assert store.peek_cycle("w2", [QUEUE]) is None


# --- no lost wake-up --------------------------------------------------------------------------


@pytest.fixture
def holder(database_url: str) -> Iterator[Store]:
    """Another worker's store, as another process would open it."""
    opened = open_store(database_url)
    try:
        yield opened
    finally:
        opened.close()


def test_a_slot_freed_while_a_woken_worker_looks_is_claimed_without_a_poll(app, holder, backend):
    """The look reads the slot taken and is held; the holder's completion commits and its wake-up
    reaches the worker's loop; then the look answers "closed". The worker polls once an hour, so
    only that wake-up can make it claim the run the completion let in. (It fails on PostgreSQL
    when the loop clears its wake-up after the turn instead of before. SQLite's listener also wakes
    on every change of `data_version` it sees, every 50 ms, so there a lost wake-up is made good.)"""
    app.queue("gate", concurrency=Concurrency(global_limit=1))

    @app.task(queue="gate", name="gate.noop")
    def noop() -> None:
        return None

    first, second = noop.submit(), noop.submit()
    [held] = holder.cycle(CycleRequest("wA", ["gate"], [], [], 1, 60)).claimed
    assert held.id == first.id
    app.store.rules()  # the rules the look judges by are cached, as after any claim

    saw_full, go, woken_after_free = threading.Event(), threading.Event(), threading.Event()
    freed = threading.Event()
    loop_wakes = []
    real_peek = app.store.peek_cycle

    def held_look(worker_id, queues):
        answer = real_peek(worker_id, queues)
        if answer is not None and not saw_full.is_set():
            saw_full.set()
            assert go.wait(TIMEOUT), "the test never let the look go"
        return answer

    app.store.peek_cycle = held_look
    worker = app.worker(queues=["gate"], max_workers=2, poll_interval=3600)
    real_wake = worker._bridge.wake

    def wake() -> None:  # on the worker's loop
        real_wake()
        loop_wakes.append(freed.is_set())
        if freed.is_set():
            woken_after_free.set()

    worker._bridge.wake = wake
    worker.start()
    try:
        assert saw_full.wait(TIMEOUT), "the woken worker never looked"
        if backend == "postgres":  # the wake-up the listener gives when LISTEN starts has come and gone
            wait_until(lambda: loop_wakes, TIMEOUT, message="the listener's first wake-up")
        freed.set()  # before the commit: its wake-up can only come after this
        holder.cycle(CycleRequest("wA", ["gate"], [held.fence], [completed(held.fence)], 0, 60))
        assert woken_after_free.wait(TIMEOUT), "the completion's wake-up never reached the worker"
        go.set()
        second.wait(TIMEOUT)
        assert second.status() is RunStatus.COMPLETED
    finally:
        go.set()
        worker.stop(timeout=30, grace=0)


def test_a_start_reported_alone_after_a_short_claim_claims_nothing(app, backend):
    """The worker claims the one run the global cap lets in (a claim of 2 that came back short),
    the run starts, and the loop reports the start before anything else happens: that turn must
    claim nothing (on the old code it claimed for the free slot, and found nothing)."""
    if backend == "sqlite":
        pytest.skip("SQLite's listener wakes on every commit it sees, the worker's own claim included")
    app.queue("gate", concurrency=Concurrency(global_limit=1))
    started, release = threading.Event(), threading.Event()

    @app.task(queue="gate", name="gate.hold")
    def hold() -> None:
        started.set()
        release.wait(3 * TIMEOUT)  # longer than any wait of the test: only the test ends it

    app.store.rules()
    cycles: list[tuple[int, int, int]] = []  # (starts, outcomes, claim limit) of every cycle
    real_cycle = app.store.cycle

    def recorded(request):
        cycles.append((len(request.starts), len(request.outcomes), request.claim_limit))
        return real_cycle(request)

    app.store.cycle = recorded
    worker = app.worker(queues=["gate"], max_workers=2, poll_interval=3600)
    loop_wakes: list[None] = []
    real_wake, real_done = worker._bridge.wake, worker._done

    def wake() -> None:
        real_wake()
        loop_wakes.append(None)

    async def done_once_started() -> bool:  # the start is reported before the loop waits again
        if worker.in_flight and not release.is_set():
            await asyncio.get_running_loop().run_in_executor(None, started.wait, TIMEOUT)
        return await real_done()

    idle = _idle_waits(worker, loop_wakes)
    worker._bridge.wake, worker._done = wake, done_once_started
    worker.start()
    try:
        # Idle after the listener's first wake-up: the submit's wake-up is the only one to come.
        wait_until(lambda: loop_wakes and idle == [len(loop_wakes)], TIMEOUT, message="the worker to idle")
        first, second = noop_runs = hold.submit_many([{}, {}])  # one commit, one wake-up
        assert started.wait(TIMEOUT)
        wait_until(lambda: any(s and not o for s, o, _ in cycles), TIMEOUT, message="the start reported alone")
        assert [limit for s, o, limit in cycles if s and not o] == [0], cycles
        release.set()
        for handle in noop_runs:
            handle.wait(TIMEOUT)
        assert first.status() is second.status() is RunStatus.COMPLETED
    finally:
        release.set()
        worker.stop(timeout=30, grace=0)


def test_a_slot_freed_before_a_start_is_reported_alone_is_still_claimed(app, holder, backend):
    """As above, but another worker frees a slot after the short claim, and its wake-up reaches
    the loop before the start is reported: the start's turn must claim (a wake-up cleared by that
    turn would be lost, and the worker polls once an hour)."""
    if backend == "sqlite":
        pytest.skip("SQLite's listener wakes on every commit it sees, the worker's own claim included")
    app.store.register_limits(RunQueueConfig(max_concurrent_runs=2), [], ["gate"])
    started, release, freed, woken_after_free = (threading.Event() for _ in range(4))
    starts: list[None] = []

    @app.task(queue="gate", name="gate.hold")
    def hold() -> None:
        starts.append(None)
        started.set()
        release.wait(3 * TIMEOUT)  # longer than any wait of the test: only the test ends it

    held_elsewhere = hold.submit()
    [other] = holder.cycle(CycleRequest("wA", ["gate"], [], [], 1, 60)).claimed
    assert other.id == held_elsewhere.id
    app.store.rules()
    worker = app.worker(queues=["gate"], max_workers=2, poll_interval=3600)
    loop_wakes: list[None] = []
    real_wake, real_done = worker._bridge.wake, worker._done
    idle = _idle_waits(worker, loop_wakes)

    def wake() -> None:
        real_wake()
        loop_wakes.append(None)
        if freed.is_set():
            woken_after_free.set()

    async def done_once_freed() -> bool:  # the free's wake-up lands before the start is reported
        if worker.in_flight and not release.is_set():
            running = asyncio.get_running_loop()
            await running.run_in_executor(None, started.wait, TIMEOUT)
            await running.run_in_executor(None, woken_after_free.wait, TIMEOUT)
        return await real_done()

    worker._bridge.wake, worker._done = wake, done_once_freed
    worker.start()
    try:
        wait_until(lambda: loop_wakes and idle == [len(loop_wakes)], TIMEOUT, message="the worker to idle")
        hold.submit_many([{}, {}])  # one is admitted (the cap is 2, wA holds one): a short claim
        assert started.wait(TIMEOUT)
        freed.set()
        holder.cycle(CycleRequest("wA", ["gate"], [other.fence], [completed(other.fence)], 0, 60))
        wait_until(lambda: len(starts) == 2, TIMEOUT, message="the run the free let in to start")
    finally:
        release.set()
        worker.stop(timeout=30, grace=0)


def _idle_waits(worker, loop_wakes: list[None]) -> list[int]:
    """Wrap the loop's wait: the list returned holds, while the loop waits with no wake-up
    pending, how many wake-ups it had seen when it began (empty otherwise), so a test can tell
    the worker idles after a given wake-up."""
    idle: list[int] = []
    real_wait = worker._wait

    async def wait(woken, result):
        if not woken.is_set():
            idle.append(len(loop_wakes))
        try:
            return await real_wait(woken, result)
        finally:
            idle.clear()

    worker._wait = wait
    return idle
