"""Children and waits through the Store port (issue 13), the same on both adapters.

`trigger_children` stores a running attempt's children and, when it waits,
ends the attempt `waiting` and releases slots as domain/waits.py plans; a
child's end (the cycle), a cancel or the sweep resumes the parent;
`run_children` reads them back; `cancel_run` cancels a tree.
"""

from __future__ import annotations

import time

import pytest

from tidegate import (
    AdmissionRejected,
    AttemptFencedOut,
    Concurrency,
    NonDeterministicReplay,
    RecursiveWaitDeadlock,
    RunQueueConfig,
    RunStatus,
    TagConcurrencyLimit,
    WaitDeadlock,
)
from tidegate.domain import events as history
from tidegate.domain.children import ABANDON, NewChild, TriggerRequest
from tidegate.domain.limits import QueueConfig
from tidegate.domain.model import CycleRequest

from .conftest import QUEUE, claim, completed, enqueue_one, execute_sql, new_run

OTHER = "other"


def child(index: int, queue: str = OTHER, *, awaited: bool = True, args=None, on_parent_cancel: str = "cancel"):
    return NewChild(new_run(queue, task="t.child", args=args or {"i": index}), index, awaited, on_parent_cancel)


def running_parent(store, queue: str = QUEUE, worker: str = "w1"):
    run_id = enqueue_one(store, queue)
    (claimed,) = claim(store, worker, queues=[queue])
    assert claimed.id == run_id
    return claimed


def holders(store, run_id: str) -> set[str]:
    return {
        scope
        for scope in ("global", f"queue:{QUEUE}", f"queue:{OTHER}")
        if any(holder.run_id == run_id for holder in store.scope_holders(scope))
    }


def types(store, run_id: str) -> list[str]:
    return [event.type for event in store.run_events(run_id)]


def test_a_wait_ends_the_attempt_waiting_links_the_children_and_releases_the_global_slot(store):
    store.register_limits(
        RunQueueConfig(max_concurrent_runs=1), [QueueConfig(QUEUE, Concurrency(global_limit=1)), QueueConfig(OTHER)], []
    )
    parent = running_parent(store)
    assert holders(store, parent.id) == {"global", f"queue:{QUEUE}"}
    answer = store.trigger_children(TriggerRequest(parent.fence, "w1", [child(0), child(1)], True, False))

    assert answer.waiting and [c.index for c in answer.children] == [0, 1]
    record = store.get_run(parent.id)
    assert record.status is RunStatus.WAITING and record.worker_id is None
    assert record.max_attempts == 2  # a wait is not an attempt
    assert record.wait_released == ["global"] and record.wait_kept == [f"queue:{QUEUE}"]
    assert holders(store, parent.id) == {f"queue:{QUEUE}"}  # kept while it waits: the child is on another queue
    kid = store.get_run(answer.children[0].id)
    assert (kid.parent_id, kid.root_id, kid.depth, kid.queue) == (parent.id, parent.id, 1, OTHER)
    assert types(store, parent.id)[-3:] == ["ChildTriggered", "ChildTriggered", "RunWaiting"]
    waiting = store.run_events(parent.id)[-1].metadata
    assert waiting["released"] == ["global"] and waiting["children"] == [c.id for c in answer.children]

    # The global slot it released lets a child run; another run of its queue still waits for the kept slot.
    blocked = enqueue_one(store, QUEUE)
    assert claim(store, "w2", queues=[QUEUE]) == []
    assert store.get_run(blocked).status is RunStatus.QUEUED
    (first,) = claim(store, "w2", queues=[OTHER])
    assert first.id == answer.children[0].id


def test_the_last_awaited_child_ending_queues_the_parent_again_and_a_replay_is_answered_from_the_store(store):
    parent = running_parent(store)
    answer = store.trigger_children(TriggerRequest(parent.fence, "w1", [child(0), child(1)], True, False))
    for index in range(2):
        (kid,) = claim(store, "w2", queues=[OTHER])
        assert store.get_run(parent.id).status is RunStatus.WAITING
        store.cycle(CycleRequest("w2", [OTHER], [], [completed(kid.fence, result=index * 10)], 0, 30.0))
    record = store.get_run(parent.id)
    assert record.status is RunStatus.QUEUED and types(store, parent.id)[-1] == "RunResumed"

    (again,) = claim(store, "w1")
    assert again.id == parent.id and again.attempt == 2
    replay = store.trigger_children(TriggerRequest(again.fence, "w1", [child(0), child(1)], True, False))
    assert not replay.waiting
    assert [(c.id, c.status, c.result) for c in replay.children] == [
        (c.id, RunStatus.COMPLETED, index * 10) for index, c in enumerate(answer.children)
    ]
    assert [c.id for c in store.run_children(parent.id)] == [c.id for c in answer.children]  # none twice


def test_a_replay_asking_for_another_call_at_a_known_position_is_refused_and_stores_nothing(store):
    parent = running_parent(store)
    store.trigger_children(TriggerRequest(parent.fence, "w1", [child(0, awaited=False)], False, False))
    with pytest.raises(NonDeterministicReplay, match="trigger #0"):
        store.trigger_children(TriggerRequest(parent.fence, "w1", [child(0, args={"i": 99}), child(1)], True, False))
    assert len(store.run_children(parent.id)) == 1
    assert store.get_run(parent.id).status is RunStatus.RUNNING


def test_a_trigger_from_an_attempt_that_is_not_running_here_is_fenced_out(store):
    parent = running_parent(store)
    with pytest.raises(AttemptFencedOut):
        store.trigger_children(TriggerRequest(parent.fence, "someone-else", [child(0)], True, False))
    with pytest.raises(AttemptFencedOut):
        store.trigger_children(TriggerRequest((parent.id, parent.attempt + 1), "w1", [child(0)], True, False))
    assert store.run_children(parent.id) == []


def test_a_recursive_wait_past_the_queue_limit_is_refused_at_once_and_stores_nothing(store):
    store.register_limits(None, [QueueConfig(QUEUE, Concurrency(global_limit=1))], [])
    parent = running_parent(store)
    answer = store.trigger_children(TriggerRequest(parent.fence, "w1", [child(0, QUEUE)], True, False))
    assert store.get_run(parent.id).wait_released == [f"queue:{QUEUE}"]  # same queue: released
    (kid,) = claim(store, "w2")
    assert kid.id == answer.children[0].id
    with pytest.raises(RecursiveWaitDeadlock) as raised:
        store.trigger_children(TriggerRequest(kid.fence, "w2", [child(0, QUEUE)], True, False))
    assert raised.value.chain == (parent.id, kid.id) and raised.value.code == "RECURSIVE_WAIT_DEADLOCK"
    assert store.run_children(kid.id) == [] and store.get_run(kid.id).status is RunStatus.RUNNING


def test_a_wait_on_a_scope_its_own_chain_keeps_is_refused_as_a_deadlock(store):
    store.register_limits(None, [QueueConfig(QUEUE, Concurrency(global_limit=1)), QueueConfig(OTHER)], [])
    parent = running_parent(store)
    store.trigger_children(TriggerRequest(parent.fence, "w1", [child(0, OTHER)], True, False))  # keeps its QUEUE slot
    (kid,) = claim(store, "w2", queues=[OTHER])
    with pytest.raises(WaitDeadlock) as raised:
        store.trigger_children(TriggerRequest(kid.fence, "w2", [child(0, QUEUE)], True, False))
    assert raised.value.scope == f"queue:{QUEUE}" and raised.value.code == "WAIT_DEADLOCK"
    assert store.run_children(kid.id) == []


def test_cancelling_a_waiting_parent_cancels_its_children_and_frees_its_kept_slots(store):
    store.register_limits(None, [QueueConfig(QUEUE, Concurrency(global_limit=1)), QueueConfig(OTHER)], [])
    parent = running_parent(store)
    answer = store.trigger_children(
        TriggerRequest(parent.fence, "w1", [child(0), child(1), child(2, on_parent_cancel=ABANDON)], True, False)
    )
    claim(store, "w2", queues=[OTHER])
    assert store.cancel_run(parent.id) is RunStatus.CANCELED
    statuses = [store.get_run(c.id) for c in answer.children]
    assert statuses[0].cancel_requested and statuses[0].status is RunStatus.RUNNING  # its worker is told
    assert statuses[1].status is RunStatus.CANCELED
    assert statuses[2].status is RunStatus.QUEUED  # abandoned: kept
    assert holders(store, parent.id) == set()
    assert store.run_events(answer.children[1].id)[-1].metadata == {"reason": f"parent {parent.id} canceled"}


def test_cancelling_an_awaited_child_resumes_its_parent(store):
    parent = running_parent(store)
    answer = store.trigger_children(TriggerRequest(parent.fence, "w1", [child(0)], True, False))
    assert store.cancel_run(answer.children[0].id) is RunStatus.CANCELED
    assert store.get_run(parent.id).status is RunStatus.QUEUED


def test_the_sweep_resumes_a_parent_whose_children_ended_by_any_path(store, database_url):
    parent = running_parent(store)
    answer = store.trigger_children(TriggerRequest(parent.fence, "w1", [child(0)], True, False))
    execute_sql(database_url, "UPDATE tidegate_runs SET status = 'completed' WHERE id = ?", (answer.children[0].id,))
    report = store.sweep("sweeper", 1.0)
    assert report is not None and report.resumed == [parent.id]
    assert store.get_run(parent.id).status is RunStatus.QUEUED


def test_a_resumed_parent_is_claimed_before_older_runs_of_its_queue(store):
    held = RunQueueConfig(tag_concurrency_limits=[TagConcurrencyLimit("hold", 1, value="yes")])
    store.register_limits(held, [QueueConfig(QUEUE), QueueConfig(OTHER)], [])
    enqueue_one(store, tags={"hold": "yes"})
    (holder,) = claim(store, "w0")  # holds the tag's one slot
    older = [enqueue_one(store, tags={"hold": "yes"}) for _ in range(2)]  # queued before the parent, same priority
    parent = running_parent(store)
    store.trigger_children(TriggerRequest(parent.fence, "w1", [child(0)], True, False))
    (kid,) = claim(store, "w2", queues=[OTHER])
    store.cycle(CycleRequest("w2", [OTHER], [], [completed(kid.fence)], 0, 30.0))
    assert store.get_run(parent.id).resumed
    store.cycle(CycleRequest("w0", [QUEUE], [], [completed(holder.fence)], 0, 30.0))  # the older runs may run now
    assert [run.id for run in store.list_queued(QUEUE, 10)] == [parent.id, *older]  # `queue list` agrees
    assert store.queue_position(parent.id) == (1, 3) and store.queue_position(older[0]) == (2, 3)  # `queue why`
    claimed = claim(store, "w1", limit=2)
    assert [run.id for run in claimed] == [parent.id, older[0]]
    assert not store.get_run(parent.id).resumed  # first once: the claim that took it cleared the mark


def test_a_resumed_parent_goes_ahead_of_higher_priorities_queued_while_it_waited(store):
    parent = running_parent(store)
    store.trigger_children(TriggerRequest(parent.fence, "w1", [child(0)], True, False))
    urgent = [enqueue_one(store, priority=9) for _ in range(2)]
    (kid,) = claim(store, "w2", queues=[OTHER])
    store.cycle(CycleRequest("w2", [OTHER], [], [completed(kid.fence)], 0, 30.0))
    assert [run.id for run in claim(store, "w1", limit=2)] == [parent.id, urgent[0]]


def test_a_resumed_parent_goes_first_within_its_limits(store):
    store.register_limits(
        RunQueueConfig(max_concurrent_runs=2), [QueueConfig(QUEUE, Concurrency(global_limit=1)), QueueConfig(OTHER)], []
    )
    parent = running_parent(store)
    store.trigger_children(
        TriggerRequest(parent.fence, "w1", [child(0)], True, False)
    )  # keeps its queue slot (cross-queue)
    (kid,) = claim(store, "w2", queues=[OTHER])
    later = enqueue_one(store, priority=9)
    store.cycle(CycleRequest("w2", [OTHER], [], [completed(kid.fence)], 0, 30.0))
    assert [run.id for run in claim(store, "w1", limit=2)] == [parent.id]  # the queue's limit of 1 still holds
    assert claim(store, "w3", limit=2) == [] and store.get_run(later).block_reason


@pytest.mark.advances_clock
def test_the_sweep_leaves_a_waiting_runs_kept_slots_alone_however_long_it_waits(store, clock):
    store.register_limits(None, [QueueConfig(QUEUE, Concurrency(global_limit=1)), QueueConfig(OTHER)], [])
    parent = running_parent(store)
    store.trigger_children(TriggerRequest(parent.fence, "w1", [child(0)], True, False))
    clock.advance(3600)  # far past any lease
    report = store.sweep("sweeper", 1.0)
    assert report is None or report.leaks_repaired == 0
    assert holders(store, parent.id) == {f"queue:{QUEUE}"}
    assert store.get_run(parent.id).status is RunStatus.WAITING


def test_release_all_releases_every_run_level_slot_while_waiting(store):
    store.register_limits(
        RunQueueConfig(max_concurrent_runs=3), [QueueConfig(QUEUE, Concurrency(global_limit=1)), QueueConfig(OTHER)], []
    )
    parent = running_parent(store)
    store.trigger_children(TriggerRequest(parent.fence, "w1", [child(0)], True, True))
    record = store.get_run(parent.id)
    assert record.wait_released == ["global", f"queue:{QUEUE}"] and record.wait_kept == []
    assert holders(store, parent.id) == set()
    other = enqueue_one(store, QUEUE)
    assert [run.id for run in claim(store, "w2")] == [other]  # its queue slot is free for others meanwhile


def test_a_wait_closing_a_cycle_across_sibling_chains_is_refused(store):
    store.register_limits(
        None, [QueueConfig("qa", Concurrency(global_limit=1)), QueueConfig("qb", Concurrency(global_limit=1))], []
    )
    root = running_parent(store)
    answer = store.trigger_children(TriggerRequest(root.fence, "w1", [child(0, "qa"), child(1, "qb")], True, False))
    claimed = {run.queue: run for run in claim(store, "w2", limit=2, queues=["qa", "qb"])}
    assert set(claimed) == {"qa", "qb"}
    first = store.trigger_children(TriggerRequest(claimed["qa"].fence, "w2", [child(0, "qb")], True, False))  # keeps qa
    assert first.waiting
    with pytest.raises(WaitDeadlock) as raised:  # would keep qb while its child needs qa: neither could run
        store.trigger_children(TriggerRequest(claimed["qb"].fence, "w2", [child(0, "qa")], True, False))
    assert raised.value.scope in ("queue:qa", "queue:qb")
    assert store.get_run(claimed["qb"].id).status is RunStatus.RUNNING and store.run_children(claimed["qb"].id) == []
    assert [c.id for c in answer.children] == [claimed["qa"].id, claimed["qb"].id]


def test_a_child_past_an_admission_ceiling_is_refused_like_a_submit_and_nothing_is_stored(store):
    store.register_limits(RunQueueConfig(max_active=2), [QueueConfig(QUEUE), QueueConfig(OTHER)], [])
    parent = running_parent(store)  # one active run: the parent
    with pytest.raises(AdmissionRejected):
        store.trigger_children(TriggerRequest(parent.fence, "w1", [child(0), child(1)], True, False))
    assert store.run_children(parent.id) == [] and store.get_run(parent.id).status is RunStatus.RUNNING
    assert store.trigger_children(TriggerRequest(parent.fence, "w1", [child(0)], True, False)).waiting  # room for one


def test_a_waiting_parent_is_pending_for_a_draining_worker(store):
    parent = running_parent(store)
    store.trigger_children(TriggerRequest(parent.fence, "w1", [child(0)], True, False))
    assert store.pending_count([QUEUE]) == 1  # it comes back to its queue: a drain must not end yet


@pytest.mark.advances_clock
def test_pruning_keeps_the_finished_children_of_an_unfinished_parent(store, clock):
    parent = running_parent(store)
    done = store.trigger_children(TriggerRequest(parent.fence, "w1", [child(0)], False, False)).children[0]
    (kid,) = claim(store, "w2", queues=[OTHER])
    store.cycle(CycleRequest("w2", [OTHER], [], [completed(kid.fence)], 0, 30.0))
    store.trigger_children(TriggerRequest(parent.fence, "w1", [child(0), child(1)], True, False))  # waits on the second
    clock.advance(3600)
    store.prune_runs(60.0, 100)
    assert store.get_run(done.id) is not None  # its replay reads it: pruning it would run it again


def test_an_operators_retry_counts_a_waiting_parent_as_active_like_a_submit_does(store):
    store.register_limits(RunQueueConfig(max_active=3), [QueueConfig(QUEUE), QueueConfig(OTHER)], [])
    parent = running_parent(store)
    canceled = [enqueue_one(store, QUEUE) for _ in range(2)]
    for run_id in canceled:
        store.cancel_run(run_id)
    assert store.trigger_children(TriggerRequest(parent.fence, "w1", [child(0)], True, False)).waiting
    store.retry_run(canceled[0])  # the waiting parent, its child and this retry: 3 active
    with pytest.raises(AdmissionRejected):
        store.retry_run(canceled[1])
    assert store.get_run(canceled[1]).status is RunStatus.CANCELED


@pytest.mark.advances_clock
def test_the_resume_event_reads_as_the_domain_writes_it_with_the_time_waited(store, clock):
    """PostgreSQL builds RunResumed in SQL (resume_parents): held to domain.events.run_resumed."""
    parent = running_parent(store)
    waiting = time.monotonic()
    store.trigger_children(TriggerRequest(parent.fence, "w1", [child(0)], True, False))
    clock.advance(42.5)
    (kid,) = claim(store, "w2", queues=[OTHER])
    store.cycle(CycleRequest("w2", [OTHER], [], [completed(kid.fence)], 0, 30.0))
    taken = time.monotonic() - waiting
    (resumed,) = [event for event in store.run_events(parent.id) if event.type == "RunResumed"]
    waited = resumed.metadata["waited"]
    assert 42.5 <= waited <= 42.5 + taken + 0.5  # the injected clock's jump, plus the real time the test took
    assert (resumed.type, resumed.metadata) == (history.run_resumed(waited).type, history.run_resumed(waited).metadata)
