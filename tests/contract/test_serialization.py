"""Every serialisation mechanism, proven by the race it forbids (a mutation check).

Each test runs a deterministic race (`tests/races.py`) twice: with the
mechanism (`intact`: no violation) and with it removed in-process
(`removed`: the violation happens). So the suite can see every race it
claims to prevent, and a mechanism that proves redundant shows as a
`removed` case that no longer fails.

PostgreSQL mechanisms are removed by turning their SQL block into `SELECT 1`:
`lock_scopes` (the scope-row locks of a run claim and of a step's pool slots),
`claim_turn` (one claimer at a time per limited queue), `rules_fence` (a
rules change waits for claims in flight), `enqueue_fence` (and for submits
in flight), `enqueue_lock` (one submitter at a time per admission ceiling).
SQLite has one mechanism for all of them, `BEGIN IMMEDIATE` (a single
writer); removed, its writes BEGIN deferred, and the second writer fails
with SQLITE_BUSY (its snapshot is stale) instead of deciding on fresh data.
"""

from __future__ import annotations

import importlib

import pytest

from tests import races
from tidegate import (
    AdmissionRejected,
    App,
    Concurrency,
    Partition,
    RunQueueConfig,
    RunStatus,
    TagConcurrencyLimit,
)
from tidegate.domain import claim_plan
from tidegate.domain.model import CycleRequest
from tidegate.domain.pools import pool_needs
from tidegate.domain.steps import SlotRequest
from tidegate.engine.operators import limits as live
from tidegate.storage.shared import slots

from .conftest import execute_sql

LEASE = 60.0
MUTATION = pytest.mark.parametrize("removed", [False, True], ids=["intact", "removed"])


def _arm(app: App, backend: str, monkeypatch: pytest.MonkeyPatch, removed: bool, query: str) -> None:
    """Track the store's transactions for the race and, if `removed`, take the mechanism out:
    the named block on PostgreSQL, BEGIN IMMEDIATE on SQLite."""
    races.track(app.store, begin_immediate=not (removed and backend == "sqlite"))
    if removed and backend == "postgres":
        races.remove_query(app.store, query)
    deciding = "claim" if backend == "postgres" else "claims"  # the module that calls `admit`
    module = importlib.import_module(f"tidegate.storage.{backend}.{deciding}")
    monkeypatch.setattr(module, "admit", races.seam(module.admit))  # park after the usage read


def _claim(app: App, worker: str, queue: str, limit: int = 1):
    return lambda: app.store.cycle(CycleRequest(worker, [queue], [], [], limit, LEASE)).claimed


def _running(app: App, queue: str | None = None) -> int:
    return app.store.status_counts(queue)[RunStatus.RUNNING]


def _one_mechanism_on_sqlite(backend: str, side: str, first: str) -> None:
    """A fence has two sides on PostgreSQL (shared for claims and submits, exclusive for
    changes), each removed in turn; on SQLite both are BEGIN IMMEDIATE, raced once."""
    if backend == "sqlite" and side != first:
        pytest.skip("one mechanism on SQLite: BEGIN IMMEDIATE, raced in the other case")


def _race(database_url: str, first: races.Party, second: races.Party) -> None:
    race = races.Race(database_url)
    try:
        race.run(first, second)
    finally:
        race.close()


# --- the scope-row locks (PostgreSQL) / BEGIN IMMEDIATE (SQLite) ----------------------------


@MUTATION
@pytest.mark.parametrize("scope", ["global", "tag"])
def test_claimers_of_two_queues_never_both_take_the_last_slot_of_a_shared_scope(
    database_url, backend, monkeypatch, removed, scope
):
    """Two claimers of different queues (so different claim turns) share one scope with one
    free slot: the global cap (3, two held) or a tag limit (2, one held). The first reads
    usage and parks before it writes; the second must wait for it (the scope row is
    locked) and then see the slot taken. Without the lock both read the same usage and
    both take the slot."""
    if scope == "global":
        run_queue, tags, limit = RunQueueConfig(max_concurrent_runs=3), None, 3
    else:
        run_queue = RunQueueConfig(tag_concurrency_limits=[TagConcurrencyLimit("db", 2, value="main")])
        tags, limit = {"db": "main"}, 2
    with App(database_url, run_queue=run_queue) as app:
        work_a = app.task(name="race.a", queue="qa", tags=tags)(lambda n: n)
        work_b = app.task(name="race.b", queue="qb", tags=tags)(lambda n: n)
        work_a.submit_many([{"n": n} for n in range(limit - 1)])
        assert len(app.store.cycle(CycleRequest("w0", ["qa"], [], [], limit, LEASE)).claimed) == limit - 1
        work_a.submit(n=10)
        work_b.submit(n=20)
        _arm(app, backend, monkeypatch, removed, "lock_scopes")
        first = races.Party("claimer-a", _claim(app, "wa", "qa"))
        second = races.Party("claimer-b", _claim(app, "wb", "qb"))
        _race(database_url, first, second)
        running = _running(app)
        violation = running > limit or first.error is not None or second.error is not None
        assert violation is removed, (running, first.error, second.error)
        if not removed:
            assert [len(first.result), len(second.result)] == [1, 0]
            assert app.store.scope_usage()[_scope_key(scope)] == limit


def _scope_key(scope: str) -> str:
    return "global" if scope == "global" else "tag:db=main"


# --- the per-queue claim turns (PostgreSQL) -----------------------------------------------------


@MUTATION
def test_a_second_claimer_of_a_limited_queue_waits_its_turn_instead_of_finding_nothing(
    database_url, backend, monkeypatch, removed
):
    """A claim of one in a limited queue reads (and on PostgreSQL locks, SKIP LOCKED) a window
    wider than what it takes. A second claimer of the same queue must wait for the first to
    commit and then take the next run; without the turn it skips every row the first holds
    and comes back empty while runs it could start wait (until the next poll)."""
    with App(database_url) as app:
        app.queue("lq", concurrency=Concurrency(global_limit=5))
        work = app.task(name="turn.work", queue="lq")(lambda n: n)
        work.submit_many([])
        window = claim_plan.plan(["lq"], app.store.rules()).open[0].window(1)
        assert window > 1
        handles = [work.submit(n=n) for n in range(window)]  # one by one: a strict claim order
        _arm(app, backend, monkeypatch, removed, "claim_turn")
        first = races.Party("claimer-1", _claim(app, "w1", "lq"))
        second = races.Party("claimer-2", _claim(app, "w2", "lq"))
        _race(database_url, first, second)
        taken = [] if second.error else [run.id for run in second.result]
        violation = first.error is not None or taken != [handles[1].id]
        assert violation is removed, (taken, first.error, second.error)
        if not removed:
            assert [run.id for run in first.result] == [handles[0].id]


@MUTATION
def test_two_claimers_of_a_fair_queue_serve_its_partitions_in_turn(database_url, backend, monkeypatch, removed):
    """A fair queue with no limit: its claimers still take turns, since fairness is judged on
    what runs. Runs of tenants a and b alternate; the first claimer takes a's and parks. The
    second must wait and then serve b; without the turn it skips the heads the first holds,
    reads a's next run and (a's running count not yet committed) starts a second run of a
    while b has none."""
    with App(database_url) as app:
        app.queue("fq", ordering="fair", concurrency=Concurrency(partition=Partition(by_args=["tenant"])))
        work = app.task(name="fair.work", queue="fq")(lambda tenant, n: n)
        handles = [work.submit(tenant=tenant, n=n) for n in range(2) for tenant in "ab"]  # a0 b0 a1 b1
        _arm(app, backend, monkeypatch, removed, "claim_turn")
        first = races.Party("claimer-1", _claim(app, "w1", "fq"))
        second = races.Party("claimer-2", _claim(app, "w2", "fq"))
        _race(database_url, first, second)
        taken = [] if second.error else [run.id for run in second.result]
        violation = first.error is not None or taken != [handles[1].id]
        assert violation is removed, (taken, [h.id for h in handles], first.error, second.error)
        if not removed:
            assert [run.id for run in first.result] == [handles[0].id]


# --- the rules fence ----------------------------------------------------------------------------


@MUTATION
@pytest.mark.parametrize("side", ["rules_fence", "claim_fence"])
def test_once_a_lowered_limit_is_set_nobody_is_admitted_under_the_old_one(
    database_url, backend, monkeypatch, removed, side
):
    """A claim reads the queue limit (3, two held) and parks before it writes; meanwhile the
    limit is lowered to 2. The change must wait for the claim in flight (which then commits
    first, under the limit it read); without the fence the change commits first and the
    claim then admits a third run under the old limit, after the new one is in force."""
    _one_mechanism_on_sqlite(backend, side, "rules_fence")
    with App(database_url) as app:
        app.queue("lq", concurrency=Concurrency(global_limit=3))
        work = app.task(name="fence.work", queue="lq")(lambda n: n)
        work.submit_many([{"n": n} for n in range(3)])
        assert len(app.store.cycle(CycleRequest("w0", ["lq"], [], [], 2, LEASE)).claimed) == 2
        _arm(app, backend, monkeypatch, removed, side)
        claimer = races.Party("claimer", _claim(app, "w1", "lq"))
        changer = races.Party("changer", lambda: live.set_limit(app.store, "queue:lq", 2))
        _race(database_url, claimer, changer)
        [[changed]] = execute_sql(database_url, "SELECT max(id) FROM tidegate_events WHERE type = 'LimitChanged'")
        late = execute_sql(
            database_url, "SELECT count(*) FROM tidegate_events WHERE type = 'RunDequeued' AND id > ?", (changed,)
        )[0][0]
        violation = late > 0 or claimer.error is not None or changer.error is not None
        assert violation is removed, (late, claimer.error, changer.error)
        if not removed:
            assert len(claimer.result) == 1 and _running(app) == 3  # admitted before the change, under 3
            assert app.store.rules().queue_limit("lq", "") == 2


# --- the admission locks ------------------------------------------------------------------------


def _stalled_enqueue(store, stall: str) -> str:
    """`enqueue`, stalled by `stall` before it reads the runs it adds (see _submit_race)."""
    head = "WITH new AS (\nSELECT * FROM jsonb_to_recordset("
    text = store._queries["enqueue"]
    assert head in text
    stalled = "WITH stall AS MATERIALIZED (" + stall + "), new AS (\nSELECT r.* FROM stall, jsonb_to_recordset("
    return text.replace(head, stalled, 1)


def _submit_race(app, database_url, backend, monkeypatch, removed, mechanism, first, second) -> races.Race:
    """Race two parties of which the first submits and holds its place (counted and inserted,
    not committed); removing `mechanism` (PostgreSQL) or BEGIN IMMEDIATE (SQLite).

    On PostgreSQL the count and the insert are one statement, the last of the submit's
    transaction, so the first party stalls inside it: the statement's snapshot is taken
    when it starts, before the stall, so what it counts is what it would have counted
    without one, and it commits only once let go."""
    race = races.Race(database_url)
    try:
        races.track(app.store, begin_immediate=not (removed and backend == "sqlite"))
        if removed and backend == "postgres":
            races.remove_query(app.store, mechanism)
        if backend == "postgres":
            with race.stall() as stall:
                races.stall_query(app.store, first, "enqueue", _stalled_enqueue(app.store, stall))
                race.run(first, second, first_parked=race.blocked, release=race.release_stall)
        else:
            runs = app.store._runs  # the aggregate that submits: park after the count, before the insert
            monkeypatch.setattr(runs, "check_admission", races.seam_after(runs.check_admission))
            race.run(first, second)
    finally:
        race.close()
    return race


@MUTATION
def test_two_submitters_never_both_take_the_last_place_under_max_active(database_url, backend, monkeypatch, removed):
    """max_active 2, one run active: two submitters race for the last place. The first has
    counted and inserted and stalls before it commits; the second must wait for it (the
    ceiling's lock) and be refused; without the lock it counts 1 too and both are stored."""
    with App(database_url, run_queue=RunQueueConfig(max_active=2)) as app:
        work = app.task(name="admit.work", queue="qa")(lambda n: n)
        work.submit(n=0)
        first = races.Party("submitter-1", lambda: work.submit(n=1))
        second = races.Party("submitter-2", lambda: work.submit(n=2))
        _submit_race(app, database_url, backend, monkeypatch, removed, "enqueue_lock", first, second)
        stored = sum(app.store.status_counts().values())
        refused = isinstance(second.error, AdmissionRejected)
        violation = stored > 2 or first.error is not None or (second.error is not None and not refused)
        assert violation is removed, (stored, first.error, second.error)
        if not removed:
            assert refused and stored == 2


@MUTATION
@pytest.mark.parametrize("side", ["enqueue_fence", "rules_fence"])
def test_once_a_lowered_ceiling_is_set_no_submit_is_admitted_under_the_old_one(
    database_url, backend, monkeypatch, removed, side
):
    """max_active 3, two runs active: a submit counts 2 and holds the third place; meanwhile
    the ceiling is lowered to 2. The change must wait for the submit (the rules fence, taken
    shared by every submit), which commits first under the ceiling it read; without the
    fence the change commits first and the submit then stores a third run past it."""
    _one_mechanism_on_sqlite(backend, side, "enqueue_fence")
    with App(database_url, run_queue=RunQueueConfig(max_active=3)) as app:
        work = app.task(name="ceiling.work", queue="qa")(lambda n: n)
        work.submit_many([{"n": 0}, {"n": 1}])
        submitter = races.Party("submitter", lambda: work.submit(n=2))
        changer = races.Party("changer", lambda: app.store.register_limits(RunQueueConfig(max_active=2), [], []))
        race = _submit_race(app, database_url, backend, monkeypatch, removed, side, submitter, changer)
        stored = sum(app.store.status_counts().values())
        late = race.second_ended_first and stored > 2
        violation = late or submitter.error is not None or changer.error is not None
        assert violation is removed, (race.second_ended_first, stored, submitter.error, changer.error)
        if not removed:
            assert stored == 3 and app.store.rules().run_queue.max_active == 2


# --- the scope-row locks of a step's pool slots -------------------------------------------------


@MUTATION
def test_two_steps_never_both_take_the_last_slot_of_a_pool(database_url, backend, monkeypatch, removed):
    """Steps of two running runs ask for the one slot of a pool. No claim turn is taken
    here: the scope-row lock (BEGIN IMMEDIATE on SQLite) alone keeps the second asker
    from deciding before the first has written its holder."""
    with App(database_url) as app:
        work = app.task(name="pool.work", queue="pq")(lambda: None)
        work.submit_many([{}, {}])
        fences = [run.fence for run in app.store.cycle(CycleRequest("w0", ["pq"], [], [], 2, LEASE)).claimed]
        app.store.set_pool_limit("db", 1, 300)
        races.track(app.store, begin_immediate=not (removed and backend == "sqlite"))
        if removed and backend == "postgres":
            races.remove_query(app.store, "lock_scopes")
        monkeypatch.setattr(slots, "decide_in_order", races.seam(slots.decide_in_order))
        first, second = (
            races.Party(
                f"step-{n}",
                lambda fence=fence: app.store.acquire_slots(fence, "w0", SlotRequest("s", pool_needs({"db": 1}), {})),
            )
            for n, fence in enumerate(fences)
        )
        _race(database_url, first, second)
        used = {pool.name: pool.claimed for pool in app.store.pools()}["db"]
        violation = used > 1 or first.error is not None or second.error is not None
        assert violation is removed, (used, first.error, second.error)
        if not removed:
            assert (first.result.granted, second.result.granted) == (True, False)
