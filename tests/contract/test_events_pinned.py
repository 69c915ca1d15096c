"""Every event both stores write, held to domain/events.py (issue 11).

SQLite writes what the domain functions return; PostgreSQL builds several of
them inside its statements (`jsonb_build_object` in the cycle, the submit, the
cancel, pool limits and step slots). Each test drives the Store port on both
backends and requires the stored type and metadata to be the domain
function's, on generated pools, slots, steps and limits where they vary.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import execute_sql
from tidegate.domain import events as history
from tidegate.domain.limits import Concurrency, QueueConfig
from tidegate.domain.model import CycleRequest
from tidegate.domain.pools import pool_scope
from tidegate.domain.steps import FinishStepRequest, SlotRequest, StepStatus, StepUpdate

from .conftest import LEASE
from .test_transitions_pinned import new_runs, running

EXAMPLES = settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
_names = itertools.count()
pool_names = st.text("abcxyz", min_size=1, max_size=4).map(lambda name: f"p{next(_names)}{name}")


def events_of(store: Any, run_id: str | None, step_key: str | None = None) -> list[history.Event]:
    return [
        history.Event(event.type, event.metadata)
        for event in store.run_events(run_id)
        if step_key is None or event.step_key == step_key
    ]


def test_a_run_s_life_reads_the_same(store):
    """RunQueued, RunDequeued, RunStarted; canceled while queued; RunBlocked with its scopes."""
    [queued] = new_runs("life", 1)
    store.enqueue([queued])
    [claimed] = store.cycle(CycleRequest("w-life", ["life"], [], [], 1, LEASE)).claimed
    store.cycle(CycleRequest("w-life", ["life"], [claimed.fence], [], 0, LEASE))
    assert events_of(store, queued.id) == [
        history.run_queued("life"),
        history.run_dequeued(1, "w-life"),
        history.run_started(1, "w-life"),
    ]
    [canceled] = new_runs("life", 1)
    store.enqueue([canceled])
    store.cancel_run(canceled.id)
    assert events_of(store, canceled.id)[-1] == history.canceled_while_queued()

    store.register_limits(None, [QueueConfig("narrow", Concurrency(global_limit=1))], [])
    first, second = new_runs("narrow", 2)
    store.enqueue([first, second])
    assert len(store.cycle(CycleRequest("w-a", ["narrow"], [], [], 2, LEASE)).claimed) == 1
    blocked = [{"scope": "queue:narrow", "used": 1, "limit": 1}]
    assert events_of(store, second.id)[-1] == history.run_blocked(blocked)


@EXAMPLES
@given(pool=pool_names, limit=st.integers(1, 5), lease=st.floats(1.0, 600.0), again=st.integers(1, 5))
def test_a_pool_limit_change_reads_the_same(store, database_url, pool, limit, lease, again):
    """LimitChanged of a pool's live override (`set_pool_limit`): both adapters build it with domain.pool_settings."""
    store.set_pool_limit(pool, limit, lease)
    store.set_pool_limit(pool, again, lease)
    rows = execute_sql(database_url, "SELECT metadata FROM tidegate_events WHERE type = 'LimitChanged' ORDER BY id")
    changes = [
        history.Event("LimitChanged", metadata)
        for metadata in (json.loads(row[0]) if isinstance(row[0], str) else row[0] for row in rows)
        if metadata["target"] == pool_scope(pool)
    ]
    assert changes == [
        history.pool_limit_changed(pool, None, limit, lease),
        history.pool_limit_changed(pool, limit, again, lease),
    ]


@EXAMPLES
@given(
    configured=st.dictionaries(pool_names, st.integers(1, 3), min_size=0, max_size=2),
    unconfigured=st.dictionaries(pool_names, st.integers(1, 3), min_size=0, max_size=2),
    fails=st.booleans(),
)
def test_a_step_s_slots_read_the_same(store, configured, unconfigured, fails):
    """StepSlotClaimed and PoolUnconfigured, StepSlotRenewed, StepSlotReleased (released, and
    by a finished step), StepStarted/StepFailed/StepCompleted: built in SQL on PostgreSQL."""
    for pool, slots in configured.items():
        store.set_pool_limit(pool, slots, 30.0)
    needs = {pool_scope(pool): slots for pool, slots in {**configured, **unconfigured}.items()}
    if not needs:
        return
    _, [fence] = running(store, 1)
    run_id, attempt = fence
    assert store.acquire_slots(fence, "w-pinned", SlotRequest("s1", needs, {})).granted
    assert store.renew_slots(fence, "s1")
    store.release_slots(fence, "s1")
    assert store.acquire_slots(fence, "w-pinned", SlotRequest("s2", needs, {})).granted
    started = StepUpdate("s2", StepStatus.RUNNING)
    ended = StepUpdate("s2", StepStatus.FAILED, error="boom") if fails else StepUpdate("s2", StepStatus.COMPLETED)
    store.record_steps(fence, [started])
    store.record_steps(fence, [ended])
    # In the order the step gave its pools (names count up, so a sorted order would differ at p9 -> p10).
    unconfigured_events = [history.pool_unconfigured(pool) for pool in unconfigured]
    assert events_of(store, run_id, "s1") == [
        history.slots_claimed(attempt, needs),
        *unconfigured_events,
        history.slots_renewed(attempt, list(needs)),
        history.slots_released(attempt, needs, history.SLOTS_RELEASED),
    ]
    assert events_of(store, run_id, "s2") == [
        history.slots_claimed(attempt, needs),  # PoolUnconfigured is said once per run
        history.step_event(attempt, started),
        history.slots_released(attempt, needs, history.step_ended(ended.status)),
        history.step_event(attempt, ended),
    ]


@EXAMPLES
@given(needs=st.dictionaries(pool_names, st.integers(1, 3), min_size=1, max_size=2))
def test_slots_handed_on_read_the_same(store, needs):
    """A finished step's slots moved to its successor: StepSlotReleased "handed to" and
    StepSlotClaimed "handed_from", built in `hand_on_holders` on PostgreSQL."""
    scopes = {pool_scope(pool): slots for pool, slots in needs.items()}
    _, [fence] = running(store, 1)
    run_id, attempt = fence
    assert store.acquire_slots(fence, "w-pinned", SlotRequest("a", scopes, {})).granted
    store.record_steps(fence, [StepUpdate("a", StepStatus.RUNNING)])
    finish = store.finish_step(
        FinishStepRequest(
            fence,
            "w-pinned",
            StepUpdate("a", StepStatus.COMPLETED),
            successor=SlotRequest("b", scopes, {}),
            successor_started=StepUpdate("b", StepStatus.RUNNING),
        )
    )
    assert finish.recorded and finish.handed is not None and finish.handed.granted
    assert history.slots_released(attempt, scopes, history.handed_to("b")) in events_of(store, run_id, "a")
    assert history.slots_claimed(attempt, scopes, handed_from="a") in events_of(store, run_id, "b")


def test_what_the_sweep_repairs_reads_the_same(store, database_url):
    """SlotLeakRepaired (`sweep_leaks`) and StepSlotReleased "lease expired" (`sweep_step_holders`)."""
    store.register_limits(None, [QueueConfig("leaky", Concurrency(global_limit=5))], [])
    store.enqueue(new_runs("leaky", 1))
    [claimed] = store.cycle(CycleRequest("w-leak", ["leaky"], [], [], 1, LEASE)).claimed
    if database_url.startswith("sqlite"):
        leak = "UPDATE tidegate_holders SET attempt = attempt + 5 WHERE run_id = ?"
    else:  # a run holds its own scopes in its row (0030_run_scopes.sql): the leak is a row left from before
        leak = (
            "INSERT INTO tidegate_holders (scope, holder, run_id, attempt, worker_id, slots, claimed_at, expires_at)"
            " SELECT 'queue:leaky', id, id, attempt + 5, worker_id, 1, now(), now() FROM tidegate_runs WHERE id = ?"
        )
    execute_sql(database_url, leak, (claimed.id,))
    _, [fence] = running(store, 1)
    assert store.acquire_slots(fence, "w-pinned", SlotRequest("s", {pool_scope("swept"): 2}, {})).granted
    if database_url.startswith("sqlite"):
        backdate = "UPDATE tidegate_holders SET expires_at = expires_at - 3600 WHERE scope = ?"
    else:
        backdate = "UPDATE tidegate_holders SET expires_at = expires_at - interval '1 hour' WHERE scope = ?"
    execute_sql(database_url, backdate, (pool_scope("swept"),))
    report = store.sweep("sweeper", 1.0)
    assert report is not None and report.leaks_repaired == 1 and report.step_slots_expired == 1
    assert events_of(store, claimed.id)[-1] == history.slot_leak_repaired("queue:leaky", 1, claimed.attempt + 5)
    released = history.slots_released(fence[1], {pool_scope("swept"): 2}, history.LEASE_EXPIRED)
    assert events_of(store, fence[0], "s")[-1] == released
