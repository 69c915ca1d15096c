"""A claim where limits apply, on PostgreSQL: two round trips once its scopes are known, still exact.

The scope rows a claim will need are locked in its first batch when the
cached rules or the keys the last claims of the same queues needed name them
(storage/postgres/claim_scopes.py), and the usage read after those locks is
what `admit` decides on. Counted here: the round trips (exact, as the code
sees them: `counted_trips`). Raced here, each mechanism of that path taken
out in turn (a mutation check, as in test_serialization.py):

- the ahead lock itself (`lock_scopes`), and the usage read as a statement of
  its own after it (a read in the locking statement has a snapshot older than
  the lock): without either, two claimers of two queues both take the last
  slot of the global cap;
- the claim fence: without it, a lowered limit commits between the usage
  read ahead and the claim, which then admits under the old limit;
- the key order: a shared key needed below one locked ahead is only tried;
  waited for instead, two claimers deadlock.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from tests import races
from tests.support.claim_windows import record_windows
from tidegate import App, Concurrency, Partition, RunQueueConfig, RunStatus, TagConcurrencyLimit
from tidegate.domain.model import CycleRequest
from tidegate.engine.operators import limits as live

from .conftest import execute_sql
from .test_children_round_trips import counted_trips

LEASE = 60.0
MUTATION = pytest.mark.parametrize("removed", [False, True], ids=["intact", "removed"])
LOCKING_READ = """WITH locked AS MATERIALIZED (
    SELECT key FROM tidegate_scopes WHERE key = ANY(%(held)s::text[]) ORDER BY key FOR UPDATE
)
SELECT scope, sum(slots)::integer FROM tidegate_slot_holders
WHERE (holder = run_id OR scope = ANY(%(held)s::text[])) AND (SELECT count(*) FROM locked) >= 0
GROUP BY scope"""


@pytest.fixture(autouse=True)
def _postgres_only(backend):
    if backend != "postgres":
        pytest.skip("round trips, scope rows and their lock order are PostgreSQL's (SQLite has one writer)")


def _cycle(app: App, worker: str, queue: str, limit: int) -> Any:
    return app.store.cycle(CycleRequest(worker, [queue], [], [], limit, LEASE))


def _claim(app: App, worker: str, queue: str, limit: int = 1):
    return lambda: _cycle(app, worker, queue, limit).claimed


@contextmanager
def _second_batches(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[set[str]]]:
    """The scope keys each claim had to lock after its first batch (what the forecast missed)."""
    from tidegate.storage.postgres.claim_scopes import ScopeLocks

    missed: list[set[str]] = []
    real = ScopeLocks.lock

    def lock(self: ScopeLocks, keys: Any) -> bool:
        missed.append(set(keys) - self.locked)
        return real(self, keys)

    monkeypatch.setattr(ScopeLocks, "lock", lock)
    yield missed


# --- the count ------------------------------------------------------------------------------


def test_a_global_cap_claim_costs_two_round_trips_while_its_queue_is_busy(database_url, monkeypatch):
    """The global cap's scope is known from the cached rules: once a claim of the queue found runs,
    the next locks it, and reads its usage, in the first batch with the window; the claim and
    the commit are the second. After a claim that found none, nothing is locked ahead (an idle
    poll of an empty queue writes nothing): a run that comes costs three again."""
    with App(database_url, run_queue=RunQueueConfig(max_concurrent_runs=4)) as app:
        work = app.task(name="trips.global", queue="g")(lambda n: n)
        work.submit_many([{"n": n} for n in range(2)])
        assert len(_cycle(app, "w0", "g", 1).claimed) == 1  # caches the rules; the queue is busy
        with counted_trips(monkeypatch) as busy:
            assert len(_cycle(app, "w1", "g", 8).claimed) == 1
        with counted_trips(monkeypatch) as empty:
            assert _cycle(app, "w1", "g", 8).claimed == []
        work.submit(n=2)
        with counted_trips(monkeypatch) as after_idle:
            assert len(_cycle(app, "w1", "g", 8).claimed) == 1
        assert (busy.trips, empty.trips, after_idle.trips) == (2, 2, 3)


def test_a_partition_and_tag_claim_costs_two_round_trips_once_its_scopes_were_seen(database_url, monkeypatch):
    """Partitions and tag values are not in the rules: the first claim locks them after reading its
    candidates (three round trips); the next claim of the queue locks them ahead (two)."""
    run_queue = RunQueueConfig(tag_concurrency_limits=[TagConcurrencyLimit("tenant", 5, per_unique_value=True)])
    with App(database_url, run_queue=run_queue) as app:
        app.queue("p", concurrency=Concurrency(global_limit=5, partition=Partition(by_args=["customer"])))
        work = app.task(name="trips.part", queue="p")(lambda customer: customer)
        for tenant in ("t0", "t1"):
            work.options(tags={"tenant": tenant}).submit_many([{"customer": f"c{n % 3}"} for n in range(4)])
        app.store.rules()
        with counted_trips(monkeypatch) as first:
            assert len(_cycle(app, "w1", "p", 2).claimed) == 2
        with counted_trips(monkeypatch) as second:
            assert len(_cycle(app, "w1", "p", 2).claimed) == 2
        assert (first.trips, second.trips) == (3, 2)


# --- the proofs -----------------------------------------------------------------------------


@MUTATION
@pytest.mark.parametrize("mechanism", ["lock", "own statement"])
def test_claimers_of_two_queues_never_both_take_the_last_slot_locked_ahead(
    database_url, monkeypatch, removed, mechanism
):
    """The global cap is 3, two held. Claimers of two queues (two claim turns) each lock the cap's
    row in their first batch, read its usage and park before they write; the second must wait
    for the first and then see the slot taken. Without the lock, or with the usage read in the
    statement that takes it (its snapshot predates the lock), both take the slot."""
    with App(database_url, run_queue=RunQueueConfig(max_concurrent_runs=3)) as app:
        work_a = app.task(name="ahead.a", queue="qa")(lambda n: n)
        work_b = app.task(name="ahead.b", queue="qb")(lambda n: n)
        work_a.submit(n=0)
        work_b.submit(n=0)
        assert len(_cycle(app, "w0", "qa", 1).claimed) == 1  # two held, and both queues busy:
        assert len(_cycle(app, "w0", "qb", 1).claimed) == 1  # their next claims lock ahead
        work_a.submit(n=10)
        work_b.submit(n=20)
        races.track(app.store)
        if removed:
            races.remove_query(app.store, "lock_scopes")
            if mechanism == "own statement":
                app.store._queries = {**app.store._queries, "scope_usage_held": LOCKING_READ}  # type: ignore[attr-defined]
        from tidegate.storage.postgres import claim

        monkeypatch.setattr(claim, "admit", races.seam(claim.admit))  # park after the usage read
        first = races.Party("claimer-a", _claim(app, "wa", "qa"))
        second = races.Party("claimer-b", _claim(app, "wb", "qb"))
        with _second_batches(monkeypatch) as missed:
            race = races.Race(database_url)
            try:
                race.run(first, second)
            finally:
                race.close()
        assert missed == [set(), set()]  # both claims were decided on the usage read ahead
        running = app.store.status_counts()[RunStatus.RUNNING]
        violation = running > 3 or first.error is not None or second.error is not None
        assert violation is removed, (running, first.error, second.error)
        if not removed:
            assert [len(first.result), len(second.result)] == [1, 0]


@MUTATION
def test_a_limit_lowered_while_a_claim_holds_its_usage_read_ahead_waits_for_it(database_url, monkeypatch, removed):
    """The queue limit is 3, two held; a claim has locked the queue's scope and read its usage in
    its first batch and parks before it writes, while the limit is lowered to 2. The change must
    wait for the claim (admitted under 3, before the change); without the claim fence it commits
    first and the claim then admits a third run under the old limit."""
    with App(database_url) as app:
        app.queue("lq", concurrency=Concurrency(global_limit=3))
        work = app.task(name="ahead.fence", queue="lq")(lambda n: n)
        work.submit_many([{"n": n} for n in range(3)])
        assert len(_cycle(app, "w0", "lq", 2).claimed) == 2
        races.track(app.store)
        if removed:
            races.remove_query(app.store, "claim_fence")
        from tidegate.storage.postgres import claim

        monkeypatch.setattr(claim, "admit", races.seam(claim.admit))
        claimer = races.Party("claimer", _claim(app, "w1", "lq"))
        changer = races.Party("changer", lambda: live.set_limit(app.store, "queue:lq", 2))
        with _second_batches(monkeypatch) as missed:
            race = races.Race(database_url)
            try:
                race.run(claimer, changer)
            finally:
                race.close()
        assert missed == [set()]
        [[changed]] = execute_sql(database_url, "SELECT max(id) FROM tidegate_events WHERE type = 'LimitChanged'")
        late = execute_sql(
            database_url, "SELECT count(*) FROM tidegate_events WHERE type = 'RunDequeued' AND id > ?", (changed,)
        )[0][0]
        violation = late > 0 or claimer.error is not None or changer.error is not None
        assert violation is removed, (late, claimer.error, changer.error)


@MUTATION
def test_a_shared_scope_needed_below_one_locked_ahead_is_tried_not_waited_for(database_url, monkeypatch, removed):
    """Per-tenant tag limits. The forecast of queue qa is tenant b, of qb tenant a (their last
    claims); now qa's next run is tenant a's and qb's tenant b's. Claimer A locks tag b ahead
    and parks before it locks what it missed; claimer B locks tag a ahead and waits for tag b
    (in key order). A's tag a, below the b it holds, is only tried: held by B, so A takes
    nothing this time and B goes on. Waited for instead, A and B wait on each other: PostgreSQL
    fails one of them (deadlock)."""
    run_queue = RunQueueConfig(tag_concurrency_limits=[TagConcurrencyLimit("tenant", 10, per_unique_value=True)])
    with App(database_url, run_queue=run_queue) as app:
        work_a = app.task(name="order.a", queue="qa")(lambda n: n)
        work_b = app.task(name="order.b", queue="qb")(lambda n: n)
        work_a.options(tags={"tenant": "b"}).submit(n=0)
        work_b.options(tags={"tenant": "a"}).submit(n=0)
        assert len(_cycle(app, "w0", "qa", 1).claimed) == 1  # qa's forecast: tag:tenant=b
        assert len(_cycle(app, "w0", "qb", 1).claimed) == 1  # qb's forecast: tag:tenant=a
        work_a.options(tags={"tenant": "a"}).submit(n=1)
        work_b.options(tags={"tenant": "b"}).submit(n=1)
        races.track(app.store)
        if removed:
            app.store._queries = {**app.store._queries, "try_lock_scopes": app.store._queries["lock_scopes"]}  # type: ignore[attr-defined]
        from tidegate.storage.postgres.claim_scopes import ScopeLocks

        first = races.Party("claimer-a", lambda: _cycle(app, "wa", "qa", 1))
        second = races.Party("claimer-b", lambda: _cycle(app, "wb", "qb", 1))
        real = ScopeLocks.lock

        def lock(self: ScopeLocks, keys: Any) -> bool:
            if races.current() is first:
                races.park_here()  # A holds tag b (ahead) and has not locked tag a yet
            return real(self, keys)

        monkeypatch.setattr(ScopeLocks, "lock", lock)
        race = races.Race(database_url)
        try:
            race.run(first, second)
        finally:
            race.close()
        violation = first.error is not None or second.error is not None
        assert violation is removed, (first.error, second.error)
        if not removed:
            assert first.result.claimed == [] and first.result.next_due_in == 0.0  # look again at once
            assert len(second.result.claimed) == 1
            assert len(_cycle(app, "wa", "qa", 1).claimed) == 1  # and then takes it: tag a is forecast now


# --- the window's margin ----------------------------------------------------------------------


def test_a_claim_reads_its_margin_only_while_the_last_one_held_something_back_or_left_too_little_room(
    database_url, monkeypatch
):
    """A queue limit of 6. A first claim of 2 reads its margin (2 + 8) and leaves room 4; the next
    reads just 2 (nothing can block it unless claims were made since). Another store (another
    process) then takes 4: the next claim of 2 reads 2 rows, both blocked: it takes nothing and
    records why, and the claim after it reads the margin again, explaining the runs behind."""
    from tidegate.bootstrap import open_store

    with App(database_url) as app:
        app.queue("m", concurrency=Concurrency(global_limit=6))
        work = app.task(name="margin.work", queue="m")(lambda n: n)
        for n in range(14):
            work.submit(n=n)  # one by one: a strict claim order
        app.store.rules()
        sizes = record_windows(monkeypatch)
        assert len(_cycle(app, "w1", "m", 2).claimed) == 2
        assert len(_cycle(app, "w1", "m", 2).claimed) == 2
        other = open_store(database_url)
        try:
            assert len(other.cycle(CycleRequest("w2", ["m"], [], [], 2, LEASE)).claimed) == 2
        finally:
            other.close()
        assert _cycle(app, "w1", "m", 2).claimed == []  # read 2, both held back by the full queue
        assert _cycle(app, "w1", "m", 2).claimed == []
        # each claim sizes its first read twice (sent ahead, then asked); the other store: its own first claim
        assert sizes == [10, 10, 2, 2, 10, 10, 2, 2, 10, 10], sizes
        queued = app.store.list_queued("m")
        assert len(queued) == 8 and all(run.block_reason for run in queued)


def test_a_claim_past_saturated_partitions_reads_them_in_its_first_batch_once_the_last_claim_did(
    database_url, monkeypatch
):
    """One slot per partition; p0..p2 each hold one run and have runs waiting behind, so a claim's
    window is all waiting and it reads the other partitions' heads (claim_partitions). The next
    claim sends that read with its first: an idle claim is two round trips (three before), and
    one that finds a run of a partition not seen yet three (its scope is locked once read)."""
    with App(database_url) as app:
        app.queue("bp", concurrency=Concurrency(global_limit=1, partition=Partition(by_args=["p"])))
        work = app.task(name="backlog.work", queue="bp")(lambda p: p)
        work.submit_many([{"p": f"p{n}"} for n in range(3)])
        assert len(_cycle(app, "holder", "bp", 3).claimed) == 3
        work.submit_many([{"p": f"p{n % 3}"} for n in range(30)])
        assert _cycle(app, "w1", "bp", 1).claimed == []  # reads the partitions after its window
        with counted_trips(monkeypatch) as idle:
            assert _cycle(app, "w1", "bp", 1).claimed == []
        work.submit(p="new")
        with counted_trips(monkeypatch) as eligible:
            [run] = _cycle(app, "w1", "bp", 1).claimed
        assert run.args == {"p": "new"}
        assert (idle.trips, eligible.trips) == (2, 3)


def test_a_claim_whose_cached_rules_moved_decides_on_usage_read_after_every_lock_it_took(database_url):
    """The store caches a global cap of 3 (and, its queue busy, locks the cap's row ahead); another
    store then sets a queue limit of 1. The next claim locked the cap ahead under the old rules,
    learns the new ones in the same round trip and sends its reads again: it must still know the
    cap's usage (read after that lock) and admit under both limits (the run held since before
    the queue limit holds no slot of it)."""
    from tidegate.bootstrap import open_store

    with App(database_url, run_queue=RunQueueConfig(max_concurrent_runs=3)) as app:
        work = app.task(name="moved.work", queue="mq")(lambda n: n)
        work.submit_many([{"n": n} for n in range(5)])
        assert len(_cycle(app, "w0", "mq", 1).claimed) == 1  # caches the rules; the queue is busy
        other = open_store(database_url)
        try:
            other.set_limit("queue:mq", 1)
        finally:
            other.close()
        assert len(_cycle(app, "w1", "mq", 4).claimed) == 1
        assert app.store.scope_usage() == {"global": 2, "queue:mq": 1}
