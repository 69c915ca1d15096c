"""Pure backpressure rules (no database): a scope's pace, why's ETA, the retry hint and the fill order.

`run_seconds` is the best known duration of a run (recent ends, else runs in
flight or history); `eta_seconds` is when a blocked run should get its slot;
`retry_after` turns the backlog and that pace into the seconds an
`AdmissionRejected` asks the caller to wait; `may_claim` and
`lowest_free_rank` are the leaky-bucket fill order of workers.
"""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from tidegate.domain.backpressure import (
    MAX_RETRY_AFTER,
    RATE_WINDOW_SECONDS,
    Pace,
    WorkerSlot,
    claimable_queues,
    eta_seconds,
    lowest_free_rank,
    retry_after,
    run_seconds,
)

# --- pace, eta_seconds (queue why) -------------------------------------------------------------

seconds = st.floats(min_value=0.001, max_value=10_000, allow_nan=False)


@st.composite
def paces(draw, known=None):
    """A Pace: some recent ends, runs in flight, a history, or none of them (known=False)."""
    ended = 0 if known is False else draw(st.integers(min_value=0, max_value=1000))
    running = 0 if known is False else draw(st.integers(min_value=0, max_value=100))
    earlier = None if known is False else draw(st.none() | seconds)
    if known and not ended and not running and earlier is None:
        running = 1
    return Pace(
        ended=ended,
        ended_seconds=ended * draw(seconds),
        running=running,
        running_seconds=running * draw(seconds),
        earlier_seconds=earlier,
    )


def test_a_pace_goes_by_recent_ends_else_the_runs_in_flight_or_the_history_whichever_is_longer():
    assert run_seconds(Pace()) is None
    assert run_seconds(Pace(ended=4, ended_seconds=2.0, running=3, running_seconds=30.0, earlier_seconds=9.0)) == 0.5
    assert run_seconds(Pace(running=2, running_seconds=0.4)) == 0.2  # a lower bound, but the best known
    assert run_seconds(Pace(running=2, running_seconds=0.4, earlier_seconds=1.0)) == 1.0  # history: 1 s runs
    assert run_seconds(Pace(running=2, running_seconds=8.0, earlier_seconds=1.0)) == 4.0  # history out of date


def test_eta_examples():
    """A backlog behind a queue of limit 3 whose runs take 0.5 s: 6 start per second."""
    assert eta_seconds(1, 3, Pace(ended=1, ended_seconds=0.5)) == 0.1  # the next end, about half a gap away
    assert eta_seconds(60, 3, Pace(ended=2, ended_seconds=1.0)) == 9.9  # 60 ends, 3 at a time
    assert eta_seconds(60, 3, Pace(running=3, running_seconds=1.5)) == 9.9  # before any end: those in flight
    assert eta_seconds(60, 3, Pace()) is None  # nothing known: no guess
    assert eta_seconds(60, 0, Pace(ended=1, ended_seconds=0.5)) is None  # a scope of limit 0 takes no run


@given(
    pace=paces(known=True),
    needed=st.integers(min_value=1, max_value=10_000),
    more=st.integers(min_value=0, max_value=10_000),
    parallel=st.integers(min_value=1, max_value=1000),
)
def test_an_eta_is_positive_and_never_shorter_further_back(pace, needed, more, parallel):
    eta = eta_seconds(needed, parallel, pace)
    assert eta is not None and eta > 0
    assert eta_seconds(needed + more, parallel, pace) >= eta


@given(
    pace=paces(known=True),
    needed=st.integers(min_value=1, max_value=10_000),
    parallel=st.integers(min_value=1, max_value=1000),
    more=st.integers(min_value=0, max_value=1000),
)
def test_an_eta_is_never_longer_for_a_wider_scope(pace, needed, parallel, more):
    assert eta_seconds(needed, parallel + more, pace) <= eta_seconds(needed, parallel, pace)


@given(needed=st.integers(min_value=1, max_value=10_000), parallel=st.integers(min_value=1, max_value=1000))
def test_an_eta_is_none_only_when_nothing_is_known(needed, parallel):
    assert eta_seconds(needed, parallel, Pace()) is None


# --- retry_after -------------------------------------------------------------------------------

limits = st.integers(min_value=1, max_value=10_000)
actives = st.integers(min_value=0, max_value=20_000)
incomings = st.integers(min_value=1, max_value=1_000)


def test_retry_after_examples():
    # nothing known (no end, nothing running, no history): slower than one a window
    assert retry_after(15, 15, 1, Pace()) == int(RATE_WINDOW_SECONDS) + 1
    # 1-second runs, 4 in flight, none ended yet: one place frees within a second, not 61
    assert retry_after(15, 15, 1, Pace(running=4, running_seconds=0.8, earlier_seconds=1.0)) == 1
    # 4-second runs, 2 at a time: a batch of 5 needs 5 places, 10 s
    assert retry_after(15, 15, 5, Pace(ended=3, ended_seconds=12.0, running=2, running_seconds=1.0)) == 10
    # a crawl is capped
    assert retry_after(10_000, 15, 1, Pace(ended=1, ended_seconds=60.0)) == MAX_RETRY_AFTER


@given(active=actives, limit=limits, incoming=incomings, pace=paces())
def test_retry_after_is_at_least_one_second_and_bounded(active, limit, incoming, pace):
    value = retry_after(active, limit, incoming, pace)
    assert isinstance(value, int)
    assert 1 <= value <= MAX_RETRY_AFTER


@given(
    active=actives,
    extra=st.integers(min_value=0, max_value=5_000),
    limit=limits,
    incoming=incomings,
    more=st.integers(min_value=0, max_value=5_000),
    pace=paces(),
)
def test_retry_after_is_monotone_in_the_backlog_and_the_batch(active, extra, limit, incoming, more, pace):
    hint = retry_after(active, limit, incoming, pace)
    assert retry_after(active + extra, limit, incoming, pace) >= hint
    assert retry_after(active, limit, incoming + more, pace) >= hint


@given(active=actives, limit=limits, incoming=incomings, pace=paces(known=True))
@settings(max_examples=300)
def test_retry_after_is_never_a_fixed_fallback_when_a_duration_is_known(active, limit, incoming, pace):
    """Whatever is known (recent ends, runs in flight, history) gives the hint: the excess ending as
    many at a time as run now, each taking the best known duration."""
    duration = run_seconds(pace)
    assert duration is not None
    excess = max(1, active + incoming - limit)
    expected = max(1, min(MAX_RETRY_AFTER, math.ceil(excess * duration / max(pace.running, 1))))
    assert retry_after(active, limit, incoming, pace) == expected


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
