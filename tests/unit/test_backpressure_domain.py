"""Pure backpressure rules (no database): the retry hint and the fill order.

`retry_after` turns the backlog and the recent completion rate into the
seconds an `AdmissionRejected` asks the caller to wait; `may_claim` and
`lowest_free_rank` are the leaky-bucket fill order of workers.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tidegate.domain.backpressure import (
    MAX_RETRY_AFTER,
    RATE_WINDOW_SECONDS,
    WorkerSlot,
    claimable_queues,
    eta_seconds,
    lowest_free_rank,
    retry_after,
)

# --- eta_seconds (queue why) -------------------------------------------------------------------


def test_eta_is_none_without_a_rate_and_the_slots_needed_over_the_rate_otherwise():
    assert eta_seconds(0, 0) is None
    assert eta_seconds(0, 1) == RATE_WINDOW_SECONDS  # one slot at one end per window
    assert eta_seconds(3, 8, window=60) == 30.0  # four slots at 8 ends a minute


# --- retry_after -------------------------------------------------------------------------------

limits = st.integers(min_value=1, max_value=10_000)
actives = st.integers(min_value=0, max_value=20_000)
incomings = st.integers(min_value=1, max_value=1_000)
completions = st.integers(min_value=0, max_value=100_000)


def test_retry_after_examples():
    # no completion in the window: slower than one a window, so more than a whole window
    assert retry_after(15, 15, 1, 0) == int(RATE_WINDOW_SECONDS) + 1
    # 15 completions a minute = one every 4s: one place frees in 4s
    assert retry_after(15, 15, 1, 15) == 4
    # a batch of 5 needs 5 places: 20s at that rate
    assert retry_after(15, 15, 5, 15) == 20
    # a fast drain never asks for less than a second
    assert retry_after(15, 15, 1, 100_000) == 1
    # a crawl is capped
    assert retry_after(10_000, 15, 1, 1) == MAX_RETRY_AFTER


@given(active=actives, limit=limits, incoming=incomings, completed=completions)
def test_retry_after_is_at_least_one_second_and_bounded(active, limit, incoming, completed):
    value = retry_after(active, limit, incoming, completed)
    assert isinstance(value, int)
    assert 1 <= value <= MAX_RETRY_AFTER


@given(
    active=actives,
    extra=st.integers(min_value=0, max_value=5_000),
    limit=limits,
    incoming=incomings,
    completed=completions,
)
def test_retry_after_is_monotone_in_the_backlog(active, extra, limit, incoming, completed):
    assert retry_after(active + extra, limit, incoming, completed) >= retry_after(active, limit, incoming, completed)


@given(active=actives, limit=limits, incoming=incomings, more=st.integers(min_value=0, max_value=5_000))
def test_retry_after_is_monotone_in_the_batch_size(active, limit, incoming, more):
    for completed in (0, 1, 7, 60, 1000):
        assert retry_after(active, limit, incoming + more, completed) >= retry_after(active, limit, incoming, completed)


@given(
    active=actives,
    limit=limits,
    incoming=incomings,
    completed=st.integers(min_value=1, max_value=50_000),
    more=st.integers(min_value=0, max_value=50_000),
)
def test_retry_after_decreases_as_the_completion_rate_rises(active, limit, incoming, completed, more):
    assert retry_after(active, limit, incoming, completed + more) <= retry_after(active, limit, incoming, completed)


@given(active=actives, limit=limits, incoming=incomings, completed=st.integers(min_value=1, max_value=50_000))
@settings(max_examples=300)
def test_no_completion_at_all_never_gives_a_shorter_hint_than_a_slow_drain(active, limit, incoming, completed):
    """A stalled queue (rate 0) drains no faster than a slow one: its hint must not be the shorter."""
    assert retry_after(active, limit, incoming, 0) >= retry_after(active, limit, incoming, completed)


# --- fill order ---------------------------------------------------------------------------------


def slot(rank, running, capacity=1, queues=("q",), id=None):
    return WorkerSlot(id or f"w{rank}", rank, capacity, running, frozenset(queues))


def may_claim(me, others, queue="q"):
    return queue in claimable_queues(me, others)


def test_the_lowest_rank_always_may_claim():
    assert may_claim(slot(0, 0), [slot(1, 0), slot(2, 0)])
    assert may_claim(slot(0, 0), [])


def test_a_higher_rank_waits_until_every_lower_rank_sharing_a_queue_is_full():
    assert not may_claim(slot(1, 0), [slot(0, 0), slot(2, 0)])
    assert may_claim(slot(1, 0), [slot(0, 1), slot(2, 0)])
    assert not may_claim(slot(2, 0), [slot(0, 1), slot(1, 0)])
    assert may_claim(slot(2, 0), [slot(0, 1), slot(1, 1)])
    # capacity, not one run, is what "full" means
    assert not may_claim(slot(1, 0), [slot(0, 2, capacity=3)])
    assert may_claim(slot(1, 0), [slot(0, 3, capacity=3)])


def test_workers_of_other_queues_and_higher_ranks_do_not_hold_a_worker_back():
    assert may_claim(slot(1, 0, queues=("a",)), [slot(0, 0, queues=("b",))], "a")
    # per queue: an idle lower rank holds back only the queues it serves
    assert claimable_queues(slot(1, 0, queues=("a", "b")), [slot(0, 0, queues=("b",))]) == {"a"}
    assert may_claim(slot(1, 0), [slot(2, 0), slot(3, 0)])


def test_the_worker_itself_in_the_list_does_not_block_it():
    me = slot(1, 0)
    assert may_claim(me, [slot(0, 1), me])


fleets = st.lists(
    st.tuples(
        st.integers(min_value=1, max_value=3),  # capacity
        st.integers(min_value=0, max_value=3),  # running (clamped to capacity)
        st.sets(st.sampled_from("abc"), min_size=1),  # queues
    ),
    min_size=1,
    max_size=6,
)


def _fleet(raw):
    return [
        WorkerSlot(f"w{rank}", rank, capacity, min(running, capacity), frozenset(queues))
        for rank, (capacity, running, queues) in enumerate(raw)
    ]


@given(fleets)
def test_a_worker_that_may_claim_has_only_full_lower_ranks_on_its_queues(raw):
    workers = _fleet(raw)
    for me in workers:
        others = [w for w in workers if w.id != me.id]
        for queue in claimable_queues(me, others):
            assert queue in me.queues
            assert all(w.running >= w.capacity for w in others if w.rank < me.rank and queue in w.queues)


@given(fleets)
@settings(max_examples=500)
def test_fill_order_never_strands_a_queue_that_has_a_free_worker(raw):
    """Liveness: for every queue, some worker serving it with a free slot is allowed to claim.

    Otherwise runs of that queue wait forever although a worker could take
    them: with w0 serving {b} idle and w1 serving {a, b}, w1 must still take
    runs of `a` (the fill order is judged per queue).
    """
    workers = _fleet(raw)
    for queue in "abc":
        free = [w for w in workers if queue in w.queues and w.running < w.capacity]
        if free:
            assert any(may_claim(w, [o for o in workers if o.id != w.id], queue) for w in free), (queue, workers)


def test_lowest_free_rank_examples():
    assert lowest_free_rank([]) == 0
    assert lowest_free_rank([0, 1, 2]) == 3
    assert lowest_free_rank([0, 2]) == 1
    assert lowest_free_rank([1, 2]) == 0
    assert lowest_free_rank([2, 0, 0, 1]) == 3


@given(st.lists(st.integers(min_value=0, max_value=20), max_size=20))
def test_lowest_free_rank_is_the_smallest_rank_not_taken(taken):
    rank = lowest_free_rank(taken)
    assert rank >= 0
    assert rank not in taken
    assert all(smaller in taken for smaller in range(rank))
