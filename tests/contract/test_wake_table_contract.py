"""Every verb of `port.WAKES` wakes a listener on another store, and no other verb frees capacity.

`peek_cycle`, the worker's gate and the passing over of a worker's own
wake-ups rest on one rule: every commit that could let a run in wakes the
listeners after it commits. The verbs that can are one table (`WAKES`); the
façade opens their wake-ups and the adapter sends them at commit.

- For each verb of the table, a scenario in which it frees something, made
  by a second store (another process, in production): the listener of the
  first is called. On SQLite every commit also moves `data_version`, which
  the listener's backstop thread watches, so there the call must come from
  the writer itself, in the writer's thread (the in-process wake-up the
  adapter sends), not from that backstop.
- Every other verb is driven against a store where something is held and
  something waits: none may free capacity (a scope's or pool's usage down, a
  run queued that was not, a limit raised). A new verb that frees capacity
  fails here until it is in the table; a new verb in neither list fails too.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

import pytest

from tests.races import TIMEOUT
from tidegate.bootstrap import open_store
from tidegate.domain.children import NewChild, TriggerRequest
from tidegate.domain.clock import ShiftedClock
from tidegate.domain.keys import ACTIVE_STATES, RunKey
from tidegate.domain.limits import Concurrency, QueueConfig
from tidegate.domain.model import CycleRequest, RunStatus, WorkerRegistration
from tidegate.domain.rates import Rate
from tidegate.domain.schedules import Firing, NewSchedule, ScheduleDefinition, Tick
from tidegate.domain.steps import FinishStepRequest, SlotRequest, StepStatus, StepUpdate
from tidegate.storage.port import VERBS, WAKES, Store

from .conftest import LEASE, QUEUE, claim, completed, enqueue_one, failed, new_run

BACKSTOP_THREAD = "tidegate-sqlite-listener"  # SQLite's listener thread, whose data_version poll sees any commit
POOL = "pool:wake"
SCHEDULE = "wake-schedule"


@pytest.fixture
def other(database_url: str, store: Store, clock: ShiftedClock) -> Iterator[Store]:
    """A second store on the same database, as another process would open it (same clock)."""
    opened = open_store(database_url, clock=clock)
    try:
        yield opened
    finally:
        opened.close()


@dataclass
class World:
    """What a scenario set up, for its action."""

    store: Store
    clock: ShiftedClock
    fence: tuple[str, int] = ("", 0)
    run_id: str = ""


def held_run(world: World) -> None:
    enqueue_one(world.store)
    [held] = claim(world.store, "w1")
    world.fence, world.run_id = held.fence, held.fence[0]


def rated_run(world: World) -> None:
    """A run of a rated queue holds its charge; the next start waits for the token it took."""
    world.store.register_limits(None, [QueueConfig(QUEUE, rate=(Rate(limit=2, per="1h", burst=1),))], [])
    held_run(world)
    enqueue_one(world.store)


def queued_behind(world: World) -> None:
    """A run holds the queue's only slot; another waits behind it (the one a cancel ends)."""
    limited(world)
    held_run(world)
    world.run_id = enqueue_one(world.store)


def holding_step(world: World) -> None:
    held_run(world)
    world.store.declare_pool("wake", 1, LEASE)
    grant = world.store.acquire_slots(world.fence, "w1", SlotRequest("s1", {POOL: 1}, {}))
    assert grant.granted


def rated_step(world: World) -> None:
    """A step paid the only token of a named rate; a step of another run waits for the next one."""
    held_run(world)
    world.store.declare_named_rate("wake", (Rate(limit=1, per="1h", burst=1),))
    assert world.store.acquire_slots(world.fence, "w1", SlotRequest("s1", {}, {}, {"wake": 1})).granted


def limited(world: World) -> None:
    world.store.register_limits(None, [QueueConfig(QUEUE, Concurrency(global_limit=1))], [])


def schedule(world: World, *, paused: bool = False) -> None:
    now = world.store.due_schedules()[0]
    first = now.replace(second=0, microsecond=0) + timedelta(minutes=1)
    definition = ScheduleDefinition(name=SCHEDULE, task="t.contract", cron="* * * * *", timezone="UTC", args={})
    world.store.register_schedules([NewSchedule(definition, first)])
    if paused:
        world.store.set_schedule_paused(SCHEDULE, True)


def fire(store: Store) -> None:
    [record] = store.list_schedules()
    tick = Tick(record.next_fire_at, new_run())
    store.fire_schedule(Firing(SCHEDULE, record.next_fire_at, (tick,), record.next_fire_at + timedelta(minutes=1)))


def failed_run(world: World) -> None:
    held_run(world)
    world.store.cycle(CycleRequest("w1", [QUEUE], [], [failed(world.fence)], 0, LEASE))


def lost_run(world: World) -> None:
    enqueue_one(world.store)
    [held] = world.store.cycle(CycleRequest("w1", [QUEUE], [], [], 1, 1.0)).claimed
    world.fence, world.run_id = held.fence, held.fence[0]
    world.clock.advance(5.0)


# verb -> (set-up, the verb's call that frees something); the set-up and the call use the second store.
SCENARIOS: dict[str, tuple[Callable[[World], None], Callable[[World], Any]]] = {
    "enqueue": (lambda w: None, lambda w: enqueue_one(w.store)),
    "enqueue_unique": (
        lambda w: None,
        lambda w: w.store.enqueue_unique([replace(new_run(), unique=RunKey("k", ACTIVE_STATES, None, "existing"))]),
    ),
    "cycle": (held_run, lambda w: w.store.cycle(CycleRequest("w1", [QUEUE], [], [completed(w.fence)], 0, LEASE))),
    "hand_back": (held_run, lambda w: w.store.hand_back("w1", [w.fence])),
    "report_cost": (rated_run, lambda w: w.store.report_cost("w1", w.fence, 0)),
    "sweep": (lost_run, lambda w: w.store.sweep("sweeper", 1.0)),
    "cancel_run": (queued_behind, lambda w: w.store.cancel_run(w.run_id)),
    "trigger_children": (
        held_run,
        lambda w: w.store.trigger_children(
            TriggerRequest(w.fence, "w1", [NewChild(new_run(), 0, False)], False, False)
        ),
    ),
    "retry_run": (failed_run, lambda w: w.store.retry_run(w.run_id)),
    "deregister_worker": (
        lambda w: w.store.register_worker(WorkerRegistration("w9", 1, [QUEUE], True, 30.0)),
        lambda w: w.store.deregister_worker("w9"),
    ),
    "register_limits": (limited, lambda w: w.store.register_limits(None, [QueueConfig(QUEUE)], [])),
    "set_limit": (limited, lambda w: w.store.set_limit(f"queue:{QUEUE}", 5)),
    "reset_limit": (
        lambda w: (limited(w), w.store.set_limit(f"queue:{QUEUE}", 0)),
        lambda w: w.store.reset_limit(f"queue:{QUEUE}"),
    ),
    "set_queue_paused": (
        lambda w: (limited(w), w.store.set_queue_paused(QUEUE, True)),
        lambda w: w.store.set_queue_paused(QUEUE, False),
    ),
    "declare_pool": (holding_step, lambda w: w.store.declare_pool("wake", 2, LEASE)),
    "set_pool_limit": (holding_step, lambda w: w.store.set_pool_limit("wake", 2, LEASE)),
    "reset_pool_limit": (
        lambda w: (holding_step(w), w.store.set_pool_limit("wake", 1, LEASE), w.store.declare_pool("wake", 3, LEASE)),
        lambda w: w.store.reset_pool_limit("wake"),
    ),
    "release_slots": (holding_step, lambda w: w.store.release_slots(w.fence, "s1")),
    "declare_named_rate": (rated_step, lambda w: w.store.declare_named_rate("wake", (Rate(limit=9, per="1s"),))),
    "set_named_rate": (rated_step, lambda w: w.store.set_named_rate("wake", (Rate(limit=9, per="1s"),))),
    "reset_named_rate": (
        lambda w: (rated_step(w), w.store.set_named_rate("wake", (Rate(limit=1, per="1m"),))),
        lambda w: w.store.reset_named_rate("wake"),
    ),
    "record_steps": (holding_step, lambda w: w.store.record_steps(w.fence, [StepUpdate("s1", StepStatus.COMPLETED)])),
    "finish_step": (
        holding_step,
        lambda w: w.store.finish_step(
            FinishStepRequest(
                w.fence, "w1", StepUpdate("s1", StepStatus.COMPLETED), successor=SlotRequest("s2", {"pool:other": 1})
            )
        ),
    ),
    "fire_schedule": (schedule, lambda w: fire(w.store)),
    "set_schedule_paused": (
        lambda w: schedule(w, paused=True),
        lambda w: w.store.set_schedule_paused(SCHEDULE, False),
    ),
}


@pytest.mark.advances_clock
def test_a_release_that_only_gives_rate_tokens_back_wakes_a_listener(store, other, clock, backend):
    """A step that held no pool slot but paid a named rate: its refund is what lets a waiter in."""
    world = World(other, clock)
    rated_step(world)
    assert_wakes(store, backend, "release_slots (refund)", lambda: world.store.release_slots(world.fence, "s1"))


def test_every_verb_of_the_table_has_a_scenario():
    assert set(SCENARIOS) == set(WAKES)


@pytest.mark.advances_clock
@pytest.mark.parametrize("verb", sorted(WAKES))
def test_each_verb_of_the_table_wakes_a_listener_on_another_store(verb, store, other, clock, backend):
    set_up, act = SCENARIOS[verb]
    world = World(other, clock)
    set_up(world)
    assert_wakes(store, backend, verb, lambda: act(world))


def assert_wakes(store: Store, backend: str, what: str, act: Callable[[], Any]) -> None:
    """`act` wakes `store`'s listener: on PostgreSQL by a NOTIFY; on SQLite by the writer itself
    (a call from a thread other than the listener's own, whose backstop sees every commit)."""
    callers: list[str] = []
    woken = threading.Event()

    def callback() -> None:
        callers.append(threading.current_thread().name)
        woken.set()

    listener = store.listen(callback)
    try:
        if backend == "postgres":  # the wake-up given when LISTEN starts
            assert woken.wait(TIMEOUT)
        woken.clear()
        callers.clear()
        act()
        if backend == "postgres":
            assert woken.wait(TIMEOUT), f"{what} did not wake a listener on another store"
        else:
            writers = [name for name in callers if name != BACKSTOP_THREAD]
            assert writers, f"{what} did not wake the listeners (only the backstop saw it)"
    finally:
        listener.close()


# The verbs of the `Submits` port that let runs in, from an event loop: the same wake-ups.
ASYNC_SCENARIOS: dict[str, tuple[Callable[[World], None], Callable[[World], Any]]] = {
    "enqueue_async": (lambda w: None, lambda w: asyncio.run(w.store.submits.enqueue_async([new_run()]))),
    "cancel_run_async": (queued_behind, lambda w: asyncio.run(w.store.submits.cancel_run_async(w.run_id))),
}


@pytest.mark.parametrize("verb", sorted(ASYNC_SCENARIOS))
def test_the_async_submits_wake_a_listener_on_another_store(verb, store, other, clock, backend):
    set_up, act = ASYNC_SCENARIOS[verb]
    world = World(other, clock)
    set_up(world)
    assert_wakes(store, backend, verb, lambda: act(world))


# --- no other verb frees capacity ------------------------------------------------------------


def quiet_world(store: Store, clock: ShiftedClock) -> World:
    """One run holds the queue's only slot and a pool's only slot; one run waits behind it."""
    world = World(store, clock)
    limited(world)
    holding_step(world)
    enqueue_one(store)
    schedule(world)
    store.register_worker(WorkerRegistration("w1", 1, [QUEUE], False, 30.0))
    return world


def capacity(store: Store) -> tuple[dict[str, int], dict[str, int], int, dict[str, int | None]]:
    """What a claim could be let in by: usage per scope and pool, runs queued, limits in force."""
    pools = {pool.name: pool.claimed for pool in store.pools()}
    queued = store.status_counts().get(RunStatus.QUEUED, 0)
    limits = {f"pool:{pool.name}": pool.limit for pool in store.pools()}
    return store.scope_usage(), pools, queued, limits


# Every port verb outside `WAKES`, driven with arguments that touch what is held and waiting.
QUIET: dict[str, Callable[[World], Any]] = {
    "migrate": lambda w: w.store.migrate(),
    "schema_version": lambda w: w.store.schema_version(),
    "check_schema": lambda w: w.store.check_schema(),
    "register_tasks": lambda w: w.store.register_tasks([], "w1"),
    "get_task": lambda w: w.store.get_task("t.contract"),
    "list_tasks": lambda w: w.store.list_tasks(),
    "register_worker": lambda w: w.store.register_worker(WorkerRegistration("w2", 1, [QUEUE], False, 30.0)),
    "heartbeat_worker": lambda w: w.store.heartbeat_worker("w1", 30.0),
    "check_overflow": lambda w: w.store.check_overflow("w1", [QUEUE], 0.0),
    "rules": lambda w: w.store.rules(),
    "limit_overrides": lambda w: w.store.limit_overrides(),
    "scope_usage": lambda w: w.store.scope_usage(),
    "rate_states": lambda w: w.store.rate_states(),
    "scope_holders": lambda w: w.store.scope_holders(f"queue:{QUEUE}"),
    "list_queued": lambda w: w.store.list_queued(QUEUE),
    "queue_counts": lambda w: w.store.queue_counts(),
    "queue_position": lambda w: w.store.queue_position(w.store.list_queued(QUEUE)[0].id),
    "peek_cycle": lambda w: w.store.peek_cycle("w2", [QUEUE]),
    "renew_leases": lambda w: w.store.renew_leases("w1", [w.fence], LEASE),
    "run_children": lambda w: w.store.run_children(w.run_id),
    "pending_count": lambda w: w.store.pending_count([QUEUE]),
    "get_run": lambda w: w.store.get_run(w.run_id),
    "page_runs": lambda w: w.store.page_runs(),
    "run_events": lambda w: w.store.run_events(w.run_id),
    "status_counts": lambda w: w.store.status_counts(),
    "list_workers": lambda w: w.store.list_workers(),
    "finished_count": lambda w: w.store.finished_count(60.0),
    "run_pace": lambda w: w.store.run_pace(60.0),
    "events_after": lambda w: w.store.events_after(0, 10),
    "latest_events": lambda w: w.store.latest_events("LimitChanged", 10),
    "last_event_id": lambda w: w.store.last_event_id(),
    "queued_shapes": lambda w: w.store.queued_shapes(),
    "run_counts": lambda w: w.store.run_counts(),
    "pools": lambda w: w.store.pools(),
    "named_rates": lambda w: w.store.named_rates(),
    "pool_holders": lambda w: w.store.pool_holders("wake"),
    "pool_waiters": lambda w: w.store.pool_waiters("wake"),
    "acquire_slots": lambda w: w.store.acquire_slots(w.fence, "w1", SlotRequest("s2", {POOL: 1}, {})),
    "acquire_many": lambda w: w.store.acquire_many(w.fence, "w1", [SlotRequest("s3", {POOL: 1})]),
    "renew_slots": lambda w: w.store.renew_slots(w.fence, "s1"),
    "run_steps": lambda w: w.store.run_steps(w.run_id),
    "next_map_item": lambda w: w.store.next_map_item(w.fence, "w1", "m", 1),
    "register_schedules": lambda w: schedule(w),
    "list_schedules": lambda w: w.store.list_schedules(),
    "due_schedules": lambda w: w.store.due_schedules(),
    "remove_schedule": lambda w: w.store.remove_schedule(SCHEDULE),
    "prune_runs": lambda w: w.store.prune_runs(0.0, 10),
    "doctor_facts": lambda w: w.store.doctor_facts(60.0),
    "listen": lambda w: w.store.listen(lambda: None).close(),
}
UNDRIVEN = {"close"}  # ends the store: nothing after it could be read


def port_verbs() -> set[str]:
    return set(VERBS)


def test_every_port_verb_either_wakes_or_is_driven_here_as_quiet():
    assert not set(WAKES) & set(QUIET)
    unclassified = sorted(port_verbs() - set(WAKES) - set(QUIET) - UNDRIVEN)
    assert not unclassified, f"verbs in neither WAKES nor this module's QUIET: {unclassified}"
    assert not (set(QUIET) | UNDRIVEN) - port_verbs(), "QUIET names a verb the port no longer has"


@pytest.mark.parametrize("verb", sorted(QUIET))
def test_a_verb_outside_the_table_frees_nothing(verb, store, clock):
    world = quiet_world(store, clock)
    usage, pools, queued, limits = capacity(store)
    rules = store.rules()
    QUIET[verb](world)
    usage_after, pools_after, queued_after, limits_after = capacity(store)
    assert store.rules() == rules, f"{verb} changed the rules (limits, pauses) without being in WAKES"
    freed = {scope: used for scope, used in usage.items() if usage_after.get(scope, 0) < used}
    freed |= {pool: used for pool, used in pools.items() if pools_after.get(pool, 0) < used}
    raised = {scope: limit for scope, limit in limits_after.items() if _looser(limit, limits.get(scope, 0))}
    assert not freed, f"{verb} freed {freed} without being in WAKES"
    assert queued_after <= queued, f"{verb} queued runs without being in WAKES"
    assert not raised, f"{verb} raised {raised} without being in WAKES"


def _looser(limit: int | None, before: int | None) -> bool:
    """Whether `limit` lets more in than `before` (None: unlimited)."""
    return before is not None and (limit is None or limit > before)
