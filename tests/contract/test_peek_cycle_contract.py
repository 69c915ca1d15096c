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

import threading
from collections.abc import Iterator

import pytest

from tests.conftest import wait_until
from tests.races import TIMEOUT
from tidegate import Concurrency, Partition, RunQueueConfig, RunStatus
from tidegate.bootstrap import open_store
from tidegate.domain.limits import QueueConfig
from tidegate.storage.port import Store

from .conftest import QUEUE, claim, completed, enqueue_one

PARTITIONED = QueueConfig(QUEUE, Concurrency(global_limit=1, partition=Partition(by_args=["p"])))
WINDOW_OF_TWO = 10  # a claim of 2 on a limited queue reads 2 + MIN_MARGIN rows (storage/claiming.py)


def fill(store: Store, count: int, **options) -> list[str]:
    return [enqueue_one(store, **options) for _ in range(count)]


# --- more: claim again at once only when the window, not a limit, cut the claim short -----------


def test_a_claim_that_fills_the_global_cap_does_not_ask_to_claim_again(store):
    """The window came back full and the claim short, but every run needs the full global cap."""
    store.register_limits(RunQueueConfig(max_concurrent_runs=1), [], [])
    fill(store, WINDOW_OF_TWO + 5)
    result = store.cycle("w1", [QUEUE], [], [], 2, 30)
    assert len(result.claimed) == 1
    assert result.more is False
    assert store.cycle("w1", [QUEUE], [], [], 1, 30).claimed == []  # and indeed nothing more


def test_a_claim_cut_short_by_the_window_asks_to_claim_again(store):
    """Partition a fills the window and only one of it can run: b's run lies past the window."""
    store.register_limits(None, [PARTITIONED], [])
    fill(store, WINDOW_OF_TWO, partition="p=a", args={"p": "a"})
    [other] = fill(store, 1, partition="p=b", args={"p": "b"})
    result = store.cycle("w1", [QUEUE], [], [], 2, 30)
    assert len(result.claimed) == 1 and result.more is True
    assert [run.id for run in claim(store, "w1", limit=1)] == [other]


def test_a_full_queue_limit_still_asks_to_claim_again_past_the_window(store):
    """A run with a concurrency key has a scope of its own: the queue's full limit binds only the
    runs without one, and the claim did not read whether any keyed run lies past its window."""
    store.register_limits(None, [QueueConfig(QUEUE, Concurrency(global_limit=1))], [])
    fill(store, WINDOW_OF_TWO)
    [keyed] = fill(store, 1, partition="key=x", concurrency_key="x")
    result = store.cycle("w1", [QUEUE], [], [], 2, 30)
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
    store.cycle("w1", [QUEUE], [held.fence], [completed(held.fence)], 0, 30)
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
    """The worker that just freed the slot is woken by its own commit: with its queue empty, a
    claim would find nothing. A run queued for later is still claimed (for its next-due time)."""
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
    [held] = holder.cycle("wA", ["gate"], [], [], 1, 60).claimed
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
        holder.cycle("wA", ["gate"], [held.fence], [completed(held.fence)], 0, 60)
        assert woken_after_free.wait(TIMEOUT), "the completion's wake-up never reached the worker"
        go.set()
        second.wait(TIMEOUT)
        assert second.status() is RunStatus.COMPLETED
    finally:
        go.set()
        worker.stop(timeout=30, grace=0)
