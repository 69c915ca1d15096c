"""No futile claims (issue 16, lever 3): `more` only when the window cut a claim short.

Same expectations on both adapters. Counts are exact: claims are explicit
cycles under made-up worker ids.
"""

from __future__ import annotations

from tidegate import Concurrency, Partition, RunQueueConfig
from tidegate.domain.limits import QueueConfig
from tidegate.storage.port import Store

from .conftest import QUEUE, claim, enqueue_one

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
