"""Adaptive limits through the Store port, on both backends (issue 25, domain/adaptive.py).

The outcomes a cycle records move the stored effective limit in the same
transaction, the claim of that cycle and every later one applies it (through
the rules, like a live limit), each move is audited as a LimitChanged with
source `adaptive`, and a live override still wins.
"""

from __future__ import annotations

import json
from typing import Any

from tests.conftest import execute_sql
from tidegate.domain import events as history
from tidegate.domain.adaptive import Adaptive
from tidegate.domain.limits import Concurrency, Partition, QueueConfig
from tidegate.domain.model import CycleRequest, Outcome, OutcomeKind
from tidegate.engine.operators.limit_table import limit_table
from tidegate.storage.port import Store

from .conftest import LEASE, claim, enqueue_one, start

QUEUE = "partner"


def _declare(store: Store, queue: str = QUEUE, **concurrency: Any) -> None:
    adaptive = Adaptive(min=1, decrease=0.5, after=2)
    store.register_limits(None, [QueueConfig(queue, Concurrency(**concurrency), adaptive=adaptive)], [])


def _running(store: Store, count: int, worker: str = "w1", queue: str = QUEUE) -> list[tuple[str, int]]:
    for _ in range(count):
        enqueue_one(store, queue)
    claimed = claim(store, worker, limit=count, queues=[queue])
    start(store, worker, [run.fence for run in claimed], queues=[queue])
    return [run.fence for run in claimed]


def _overloaded(fence: tuple[str, int]) -> Outcome:
    return Outcome(fence[0], fence[1], OutcomeKind.SNOOZED, retry_delay=60.0, overloaded=True)


def _done(fence: tuple[str, int]) -> Outcome:
    return Outcome(fence[0], fence[1], OutcomeKind.COMPLETED)


def _changes(database_url: str) -> list[dict[str, Any]]:
    rows = execute_sql(database_url, "SELECT metadata FROM tidegate_events WHERE type = 'LimitChanged' ORDER BY id")
    found = [json.loads(row[0]) if isinstance(row[0], str) else row[0] for row in rows]
    return [metadata for metadata in found if metadata.get("source") == "adaptive"]


def test_overload_lowers_the_limit_once_per_generation_and_the_same_cycle_claims_under_it(
    store: Store, database_url: str
) -> None:
    _declare(store, global_limit=8)
    fences = _running(store, 8)
    for _ in range(8):
        enqueue_one(store, QUEUE)
    # All eight report overload at once: admitted under the old limit, they cut it once, 8 -> 4.
    result = store.cycle(CycleRequest("w1", [QUEUE], [], [_overloaded(fence) for fence in fences], 8, LEASE))
    assert len(result.claimed) == 4  # the same cycle's claim reads the lowered limit
    assert store.rules().queue_limit(QUEUE, "") == 4
    assert _changes(database_url) == [history.adaptive_limit_changed(f"queue:{QUEUE}", 8, 4, "overloaded").metadata]

    # Claimed after the cut: their overload cuts again, 4 -> 2, and nothing more is claimed.
    start(store, "w1", [run.fence for run in result.claimed], queues=[QUEUE])
    again = store.cycle(
        CycleRequest("w1", [QUEUE], [], [_overloaded(run.fence) for run in result.claimed[:1]], 8, LEASE)
    )
    assert again.claimed == [] and store.rules().queue_limit(QUEUE, "") == 2
    assert [change["new"] for change in _changes(database_url)] == [4, 2]


def test_successes_raise_it_back_by_steps_up_to_the_declared_limit(store: Store, database_url: str) -> None:
    _declare(store, global_limit=3)
    [fence] = _running(store, 1)
    store.cycle(CycleRequest("w1", [QUEUE], [], [_overloaded(fence)], 0, LEASE))
    assert store.rules().queue_limit(QUEUE, "") == 1
    for _ in range(4):  # rounds that fill the limit; two successes per step (after=2): 1, 1 -> 2 -> 3, stays 3
        fences = _running(store, store.rules().queue_limit(QUEUE, "") or 0)
        store.cycle(CycleRequest("w1", [QUEUE], [], [_done(fence) for fence in fences], 0, LEASE))
    assert store.rules().queue_limit(QUEUE, "") == 3
    assert [(c["old"], c["new"], c["reason"]) for c in _changes(database_url)] == [
        (3, 1, "overloaded"),
        (1, 2, "recovered"),
        (2, 3, "recovered"),
    ]


def test_each_partition_adapts_on_its_own_and_a_live_override_wins(store: Store) -> None:
    _declare(store, "parts", global_limit=4, partition=Partition(by_args=["key"]))
    enqueue_one(store, "parts", partition="key=a")
    enqueue_one(store, "parts", partition="key=b")
    claimed = claim(store, "w1", limit=2, queues=["parts"])
    start(store, "w1", [run.fence for run in claimed], queues=["parts"])
    hot = next(run for run in claimed if store.get_run(run.id).partition == "key=a")  # type: ignore[union-attr]
    store.cycle(CycleRequest("w1", ["parts"], [], [_overloaded(hot.fence)], 0, LEASE))
    rules = store.rules()
    assert (rules.queue_limit("parts", "key=a"), rules.queue_limit("parts", "key=b")) == (2, 4)
    rows = {row.target: row for row in limit_table(store).limits}
    assert rows["queue:parts/key=a"].limit == 2 and rows["queue:parts/key=a"].adaptive == "adaptive 2 of 4 (overloaded)"

    store.set_limit("queue:parts/key=a", 3)
    assert store.rules().queue_limit("parts", "key=a") == 3


def test_successes_under_a_limit_nobody_fills_leave_it(store: Store) -> None:
    """One run at a time under a limit of 3 says nothing about the room above it."""
    _declare(store, global_limit=3)
    [fence] = _running(store, 1)
    store.cycle(CycleRequest("w1", [QUEUE], [], [_overloaded(fence)], 0, LEASE))  # 3 -> 1
    for _ in range(2):
        [fence] = _running(store, 1)
        store.cycle(CycleRequest("w1", [QUEUE], [], [_done(fence)], 0, LEASE))
    assert store.rules().queue_limit(QUEUE, "") == 2  # full at 1: raised
    for _ in range(4):
        [fence] = _running(store, 1)
        store.cycle(CycleRequest("w1", [QUEUE], [], [_done(fence)], 0, LEASE))
    assert store.rules().queue_limit(QUEUE, "") == 2  # never full at 2: kept


def test_queues_that_do_not_adapt_store_nothing(store: Store, database_url: str) -> None:
    store.register_limits(None, [QueueConfig(QUEUE, Concurrency(global_limit=2))], [])
    [fence] = _running(store, 1)
    store.cycle(CycleRequest("w1", [QUEUE], [], [_overloaded(fence)], 0, LEASE))
    assert execute_sql(database_url, "SELECT count(*) FROM tidegate_adaptive_limits") == [(0,)]
    assert store.rules().queue_limit(QUEUE, "") == 2
