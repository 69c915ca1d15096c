"""Queues through the Store port: per-queue run counts, and pausing or resuming a queue.

A pause is stored with the rules (their version moves, so a claimer that
cached them reads it at its next claim), claims nothing of the queue while
runs of other queues are claimed, survives a new store and a re-declaration
of the queue, and is audited as a LimitChanged. Same on both adapters.
"""

from __future__ import annotations

import json

import pytest

from tidegate import Concurrency, QueueConfig, QueueCounts, QueueNotFound, RunStatus
from tidegate.bootstrap import open_store
from tidegate.engine.operators import queues

from .conftest import QUEUE, claim, enqueue_one, execute_sql

OTHER = "other"


def _audit(database_url: str) -> list[dict[str, object]]:
    rows = execute_sql(database_url, "SELECT metadata FROM tidegate_events WHERE type = 'LimitChanged' ORDER BY id")
    return [json.loads(metadata) if isinstance(metadata, str) else metadata for (metadata,) in rows]


def test_a_paused_queue_is_claimed_from_no_more_until_resumed(store):
    store.register_limits(None, [], [QUEUE, OTHER])
    assert claim(store, queues=[QUEUE, OTHER]) == []  # the claimer has the rules cached now
    held = [enqueue_one(store) for _ in range(2)]
    other = enqueue_one(store, OTHER)

    assert store.set_queue_paused(QUEUE, True) is True
    assert store.rules().paused == {QUEUE}
    assert [run.id for run in claim(store, limit=5, queues=[QUEUE, OTHER])] == [other]
    assert claim(store, limit=5, queues=[QUEUE]) == []
    assert {store.get_run(run_id).status for run_id in held} == {RunStatus.QUEUED}

    assert store.set_queue_paused(QUEUE, False) is True
    assert store.rules().paused == frozenset()
    assert sorted(run.id for run in claim(store, limit=5, queues=[QUEUE, OTHER])) == sorted(held)


def test_a_pause_is_audited_once_per_change(store, database_url):
    store.register_limits(None, [], [QUEUE])
    assert store.set_queue_paused(QUEUE, True) is True
    assert store.set_queue_paused(QUEUE, True) is False  # already paused: nothing written
    assert store.set_queue_paused(QUEUE, False) is True
    assert store.set_queue_paused(QUEUE, False) is False
    assert _audit(database_url) == [
        {"target": f"queue:{QUEUE}", "paused": True},
        {"target": f"queue:{QUEUE}", "paused": False},
    ]


def test_pausing_an_undeclared_queue_is_refused_and_writes_nothing(store, database_url):
    store.register_limits(None, [], [QUEUE])
    with pytest.raises(QueueNotFound, match="nowhere"):
        store.set_queue_paused("nowhere", True)
    assert store.rules().paused == frozenset() and _audit(database_url) == []


def test_a_pause_survives_a_new_store_and_a_new_declaration(store, database_url, clock):
    store.register_limits(None, [QueueConfig(QUEUE)], [])
    store.set_queue_paused(QUEUE, True)
    again = open_store(database_url, clock=clock)
    try:
        again.register_limits(None, [QueueConfig(QUEUE, Concurrency(global_limit=2))], [QUEUE])
        assert again.rules().paused == {QUEUE} and again.rules().queue_limit(QUEUE, "") == 2
        enqueue_one(again)
        assert claim(again) == []
    finally:
        again.close()


def test_queue_counts_are_queued_and_running_per_queue_and_blocked_is_derived(store):
    store.register_limits(None, [QueueConfig(QUEUE, Concurrency(global_limit=1))], [OTHER])
    assert store.queue_counts() == {}
    for _ in range(3):
        enqueue_one(store)
    enqueue_one(store, OTHER)
    claim(store, limit=5, queues=[QUEUE])  # one runs; the others are held back by the limit
    assert store.queue_counts() == {QUEUE: QueueCounts(queued=2, running=1), OTHER: QueueCounts(queued=1, running=0)}
    assert {summary.name: summary.blocked for summary in queues.summaries(store)} == {QUEUE: 2, OTHER: 0}
