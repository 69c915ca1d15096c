"""Run gates end to end, on both adapters: every limit seen from inside the tasks.

Tasks record when they start and end (`tests.apps.gates.Recorder`); the
largest overlap among the runs of one scope must never exceed its limit and,
where the limit is the only thing holding runs back, must reach it (so that a
gate which admits nothing, or one that admits everything, both fail).
"""

from __future__ import annotations

import time

import pytest

from tests.apps.gates import Recorder, max_overlap
from tidegate import (
    App,
    Concurrency,
    Context,
    InvalidArgument,
    Partition,
    RunQueueConfig,
    RunStatus,
    TagConcurrencyLimit,
)
from tidegate.domain.model import CycleRequest, Outcome, OutcomeKind

from .conftest import wait_until

HOLD = 0.15  # long enough that runs claimed together really overlap


@pytest.fixture
def make_app(database_url, clock):
    apps: list[App] = []

    def make(run_queue: RunQueueConfig | None = None) -> App:
        application = App(database_url, run_queue=run_queue, clock=clock)
        apps.append(application)
        return application

    yield make
    for application in apps:
        application.close()


def _sleeper(app: App, recorder: Recorder, name: str, queue: str):
    @app.task(name=name, queue=queue)
    def sleeper(ctx: Context, seconds: float = HOLD, customer_id=None, tenant: str = "", n: int = 0) -> str:
        with recorder.running(ctx):
            time.sleep(seconds)
        return ctx.run_id

    return sleeper


def _ids(handles):
    return [handle.id for handle in handles]


def _wait_all(handles, timeout=60):
    for handle in handles:
        handle.wait(timeout=timeout)


# --- tag limits -------------------------------------------------------------------------------


def test_a_fixed_value_tag_limit_holds_only_runs_with_that_value(make_app, start_worker):
    app = make_app(RunQueueConfig(tag_concurrency_limits=[TagConcurrencyLimit(key="env", value="prod", limit=2)]))
    recorder = Recorder()
    task = _sleeper(app, recorder, "g.tagged", "tagged")
    prod = task.options(tags={"env": "prod"}).submit_many([{}] * 8)
    dev = task.options(tags={"env": "dev"}).submit_many([{}] * 6)
    plain = task.submit_many([{}] * 4)
    start_worker(application=app, max_workers=8)
    start_worker(application=app, max_workers=8)
    _wait_all(prod + dev + plain)
    assert recorder.peak(_ids(prod)) == 2
    assert recorder.peak(_ids(dev) + _ids(plain)) > 2  # other values are not limited
    assert app.store.scope_usage() == {}


def test_a_per_unique_value_tag_limit_gives_each_value_its_own_limit(make_app, start_worker):
    app = make_app(
        RunQueueConfig(tag_concurrency_limits=[TagConcurrencyLimit(key="tenant", per_unique_value=True, limit=2)])
    )
    recorder = Recorder()
    task = _sleeper(app, recorder, "g.per_tenant", "per_tenant")
    by_tenant = {t: task.options(tags={"tenant": t}).submit_many([{}] * 6) for t in ("a", "b", "c")}
    start_worker(application=app, max_workers=8)
    start_worker(application=app, max_workers=8)
    _wait_all([h for handles in by_tenant.values() for h in handles])
    for tenant, handles in by_tenant.items():
        assert recorder.peak(_ids(handles)) == 2, tenant
    assert recorder.peak() == 6  # one limit per value, not one shared limit


def test_two_tasks_on_one_queue_share_its_limit(make_app, start_worker):
    app = make_app()
    app.queue("shared", concurrency=Concurrency(global_limit=3))
    recorder = Recorder()
    first = _sleeper(app, recorder, "g.first", "shared")
    second = _sleeper(app, recorder, "g.second", "shared")
    handles = first.submit_many([{}] * 6) + second.submit_many([{}] * 6)
    start_worker(application=app, max_workers=8)
    start_worker(application=app, max_workers=8)
    _wait_all(handles)
    assert recorder.peak() == 3
    assert recorder.peak(_ids(handles[:6])) >= 1 and recorder.peak(_ids(handles[6:])) >= 1


def test_a_concurrency_key_gives_each_tenant_one_lane_with_the_queues_limit(make_app, start_worker):
    app = make_app()
    app.queue("lanes", concurrency=Concurrency(global_limit=2))
    recorder = Recorder()
    task = _sleeper(app, recorder, "g.lane", "lanes")
    acme = task.options(concurrency_key="acme").submit_many([{}] * 6)
    globex = task.options(concurrency_key="globex").submit_many([{}] * 6)
    assert acme[0].info().partition == "key=acme"
    start_worker(application=app, max_workers=8)
    _wait_all(acme + globex)
    assert recorder.peak(_ids(acme)) == 2
    assert recorder.peak(_ids(globex)) == 2
    assert recorder.peak() == 4  # two lanes, each with the queue's limit


def test_by_args_partitions_and_a_missing_key_is_one_shared_partition(make_app, start_worker):
    app = make_app()
    app.queue("bycust", concurrency=Concurrency(global_limit=1, partition=Partition(by_args=["customer_id"])))
    recorder = Recorder()
    task = _sleeper(app, recorder, "g.bycust", "bycust")
    one = task.submit_many([{"customer_id": 1}] * 4)
    two = task.submit_many([{"customer_id": 2}] * 4)
    missing = task.submit_many([{}] * 3) + task.submit_many([{"customer_id": None}] * 3)
    assert {h.info().partition for h in missing} == {"customer_id="}
    assert one[0].info().partition == "customer_id=1"
    start_worker(application=app, max_workers=8)
    _wait_all(one + two + missing)
    assert recorder.peak(_ids(one)) == 1
    assert recorder.peak(_ids(two)) == 1
    assert recorder.peak(_ids(missing)) == 1  # the runs without the key share one partition
    assert recorder.peak() == 3


def test_by_kind_partitions_each_task_separately(make_app, start_worker):
    app = make_app()
    app.queue("bykind", concurrency=Concurrency(global_limit=2, partition=Partition(by_kind=True)))
    recorder = Recorder()
    mail = _sleeper(app, recorder, "g.mail", "bykind")
    sms = _sleeper(app, recorder, "g.sms", "bykind")
    mails = mail.submit_many([{}] * 5)
    smss = sms.submit_many([{}] * 5)
    assert mails[0].info().partition == "kind=g.mail"
    start_worker(application=app, max_workers=8)
    _wait_all(mails + smss)
    assert recorder.peak(_ids(mails)) == 2
    assert recorder.peak(_ids(smss)) == 2
    assert recorder.peak() == 4


def test_an_override_tier_gives_one_partition_a_bigger_limit(make_app, start_worker):
    app = make_app()
    app.queue(
        "tier",
        concurrency=Concurrency(global_limit=1, partition=Partition(by_args=["tenant"]), overrides={"tenant=big": 3}),
    )
    recorder = Recorder()
    task = _sleeper(app, recorder, "g.tier", "tier")
    big = task.submit_many([{"tenant": "big"}] * 9)
    small = task.submit_many([{"tenant": "small"}] * 4)
    start_worker(application=app, max_workers=8)
    _wait_all(big + small)
    assert recorder.peak(_ids(big)) == 3
    assert recorder.peak(_ids(small)) == 1


def test_the_global_cap_holds_across_queues(make_app, start_worker):
    app = make_app(RunQueueConfig(max_concurrent_runs=3))
    recorder = Recorder()
    a = _sleeper(app, recorder, "g.cap_a", "cap_a")
    b = _sleeper(app, recorder, "g.cap_b", "cap_b")
    handles = a.submit_many([{}] * 6) + b.submit_many([{}] * 6)
    start_worker(application=app, max_workers=8)
    start_worker(application=app, max_workers=8)
    _wait_all(handles)
    assert recorder.peak() == 3


# --- routing --------------------------------------------------------------------------------------


def test_routing_to_a_declared_queue_uses_that_queues_limit(make_app, start_worker, database_url):
    app = make_app()
    app.queue("narrow", concurrency=Concurrency(global_limit=2))
    recorder = Recorder()
    task = _sleeper(app, recorder, "g.route", "wide")
    routed = task.options(queue="narrow").submit_many([{}] * 6)
    assert {h.info().queue for h in routed} == {"narrow"}
    plain = task.submit_many([{}] * 6)
    start_worker(application=app, max_workers=8, queues=["wide", "narrow"])
    _wait_all(routed + plain)
    assert recorder.peak(_ids(routed)) == 2
    assert recorder.peak(_ids(plain)) > 2  # its own queue has no limit

    # an app that did not declare `narrow` routes to it by the stored declaration
    with App(database_url) as caller:
        handle = caller.submit("g.route", args={}, queue="narrow")
        handle.wait(timeout=30)
        assert handle.info().queue == "narrow"


def test_routing_to_an_undeclared_queue_is_refused_and_stores_nothing(make_app):
    app = make_app()
    app.queue("declared", concurrency=Concurrency(global_limit=2))
    recorder = Recorder()
    task = _sleeper(app, recorder, "g.route2", "home")
    with pytest.raises(InvalidArgument, match="nowhere"):
        task.options(queue="nowhere").submit()
    with pytest.raises(InvalidArgument, match="nowhere"):
        task.options(queue="nowhere").submit_many([{}] * 3)
    with pytest.raises(InvalidArgument, match="nowhere"):
        app.submit("g.route2", args={}, queue="nowhere")
    assert app.store.page_runs() == []
    assert set(app.store.status_counts().values()) == {0}
    assert "nowhere" not in app.store.rules().queues


# --- worker capacity: the River Pro FAQ end to end ------------------------------------------------


def _workers_of(app, handles):
    """Which worker claimed each run (the RunDequeued event says)."""
    found = {}
    for handle in handles:
        dequeued = [e for e in app.store.run_events(handle.id) if e.type == "RunDequeued"]
        found[handle.id] = dequeued[-1].metadata["worker"]
    return found


def test_faq_global_20_local_5_with_10_running_each_worker_takes_at_most_5(make_app, start_worker):
    app = make_app()
    app.queue("faq", concurrency=Concurrency(global_limit=20, local_limit=5))
    recorder = Recorder()
    task = _sleeper(app, recorder, "g.faq", "faq")
    held = task.submit_many([{"n": i} for i in range(10)])
    store = app.store
    # two other workers hold 10 runs; the local limit lets each take only 5
    assert len(store.cycle(CycleRequest("elsewhere-1", ["faq"], [], [], 10, 60)).claimed) == 5
    assert len(store.cycle(CycleRequest("elsewhere-2", ["faq"], [], [], 10, 60)).claimed) == 5
    assert store.scope_usage() == {"queue:faq": 10}
    handles = task.submit_many([{"n": i} for i in range(30)])
    for _ in range(3):
        start_worker(application=app, max_workers=20)
    _wait_all(handles)
    assert recorder.peak(_ids(handles)) == 10  # the 10 slots left of 20
    by_worker = _workers_of(app, handles)
    peaks = {
        worker: recorder.peak([r for r, w in by_worker.items() if w == worker]) for worker in set(by_worker.values())
    }
    assert max(peaks.values()) == 5, peaks
    assert all(peak <= 5 for peak in peaks.values()), peaks
    assert {h.status() for h in held} == {RunStatus.RUNNING}


@pytest.mark.parametrize(
    ("capacity", "max_workers", "local", "global_", "expected"),
    [(3, None, 5, 20, 3), (8, 2, 5, 20, 2), (8, None, 5, 20, 5), (8, None, 5, 4, 4)],
    ids=["capacity", "queue-max-workers", "local", "global"],
)
def test_faq_without_partitions_a_worker_takes_the_least_of_its_caps(
    make_app, start_worker, capacity, max_workers, local, global_, expected
):
    app = make_app()
    app.queue("flat", concurrency=Concurrency(global_limit=global_, local_limit=local), max_workers=max_workers)
    recorder = Recorder()
    task = _sleeper(app, recorder, "g.flat", "flat")
    handles = task.submit_many([{"n": i} for i in range(12)])
    start_worker(application=app, max_workers=capacity)
    _wait_all(handles)
    assert recorder.peak() == expected


def test_faq_with_partitions_a_worker_fills_its_capacity_but_each_partition_keeps_its_limits(make_app, start_worker):
    app = make_app()
    app.queue(
        "parts",
        concurrency=Concurrency(global_limit=3, local_limit=2, partition=Partition(by_args=["tenant"])),
    )
    recorder = Recorder()
    task = _sleeper(app, recorder, "g.parts", "parts")
    by_tenant = {t: task.submit_many([{"tenant": t, "n": i} for i in range(8)]) for t in "abc"}
    everything = [h for handles in by_tenant.values() for h in handles]

    start_worker(application=app, max_workers=5)
    _wait_all(everything)
    assert recorder.peak() == 5  # up to capacity, across partitions
    assert max(recorder.peak(_ids(h)) for h in by_tenant.values()) == 2  # the local limit binds
    assert all(recorder.peak(_ids(h)) <= 2 for h in by_tenant.values())


def test_faq_with_partitions_two_workers_reach_a_partitions_global_limit_not_more(make_app, start_worker):
    app = make_app()
    app.queue(
        "parts2",
        concurrency=Concurrency(global_limit=3, local_limit=2, partition=Partition(by_args=["tenant"])),
    )
    recorder = Recorder()
    task = _sleeper(app, recorder, "g.parts2", "parts2")
    by_tenant = {t: task.submit_many([{"tenant": t, "n": i} for i in range(9)]) for t in "ab"}
    everything = [h for handles in by_tenant.values() for h in handles]
    start_worker(application=app, max_workers=8)
    start_worker(application=app, max_workers=8)
    _wait_all(everything)
    for tenant, handles in by_tenant.items():
        assert recorder.peak(_ids(handles)) == 3, tenant  # the global limit of the partition binds
        by_worker = _workers_of(app, handles)
        for worker in set(by_worker.values()):
            assert recorder.peak([r for r, w in by_worker.items() if w == worker]) <= 2  # local, per worker


# --- head-of-line blocking ----------------------------------------------------------------------------


def _race(recorder, backlog, latecomer, *, enough=60):
    """Wait until the latecomer completed, or the backlog's runs completed `enough` times over."""
    backlog_ids = set(_ids(backlog))

    def settled():
        if latecomer.status() is RunStatus.COMPLETED:
            return True
        return sum(1 for run_id in recorder.started if run_id in backlog_ids) >= enough

    wait_until(settled, 60, 0.01, message="the latecomer to complete or the backlog to move on")
    return latecomer.status()


def test_a_saturated_partition_with_a_big_backlog_does_not_delay_another_partition(make_app, start_worker):
    app = make_app()
    app.queue("hol", concurrency=Concurrency(global_limit=2, partition=Partition(by_args=["tenant"])))
    recorder = Recorder()
    task = _sleeper(app, recorder, "g.hol", "hol")
    backlog = task.submit_many([{"tenant": "a", "seconds": 0.1, "n": i} for i in range(1000)])
    latecomer = task.submit(tenant="b", seconds=0.01)
    start_worker(application=app, max_workers=4)
    assert _race(recorder, backlog, latecomer) is RunStatus.COMPLETED
    assert app.store.status_counts(queue="hol")[RunStatus.QUEUED] >= 900  # a's runs are still mostly queued


def test_a_saturated_tag_with_a_big_backlog_does_not_delay_another_tag_value(make_app, start_worker):
    """The same as above with the backlog held back by a per-tenant tag limit instead of a partition."""
    app = make_app(
        RunQueueConfig(tag_concurrency_limits=[TagConcurrencyLimit(key="tenant", per_unique_value=True, limit=2)])
    )
    recorder = Recorder()
    task = _sleeper(app, recorder, "g.hol_tag", "hol_tag")
    backlog = task.options(tags={"tenant": "a"}).submit_many([{"seconds": 0.1, "n": i} for i in range(1000)])
    latecomer = task.options(tags={"tenant": "b"}).submit(seconds=0.01)
    start_worker(application=app, max_workers=4)
    assert _race(recorder, backlog, latecomer) is RunStatus.COMPLETED
    assert app.store.status_counts(queue="hol_tag")[RunStatus.QUEUED] >= 900


def test_a_partition_at_its_local_limit_does_not_delay_another_partition(make_app, start_worker):
    """Per-worker local limits skip too: a worker with free capacity takes another partition's run."""
    app = make_app()
    app.queue("hol_local", concurrency=Concurrency(local_limit=2, partition=Partition(by_args=["tenant"])))
    recorder = Recorder()
    task = _sleeper(app, recorder, "g.hol_local", "hol_local")
    backlog = task.submit_many([{"tenant": "a", "seconds": 0.1, "n": i} for i in range(1000)])
    latecomer = task.submit(tenant="b", seconds=0.01)
    start_worker(application=app, max_workers=4)
    assert _race(recorder, backlog, latecomer) is RunStatus.COMPLETED
    assert app.store.status_counts(queue="hol_local")[RunStatus.QUEUED] >= 900


# --- fairness -----------------------------------------------------------------------------------------


def test_a_fair_queue_lets_a_late_small_tenant_through_a_big_backlog(make_app, start_worker, clock):
    app = make_app(RunQueueConfig(max_concurrent_runs=4))
    app.queue("fair", concurrency=Concurrency(partition=Partition(by_args=["tenant"])), ordering="fair")
    recorder = Recorder()
    task = _sleeper(app, recorder, "g.fair", "fair")
    tenant_a = task.submit_many([{"tenant": "a", "seconds": 0.02, "n": i} for i in range(1000)])
    clock.advance(0.01)  # b's runs are strictly younger
    tenant_b = task.submit_many([{"tenant": "b", "seconds": 0.02, "n": i} for i in range(10)])
    start_worker(application=app, max_workers=8)
    b_ids = set(_ids(tenant_b))
    a_ids = set(_ids(tenant_a))

    def settled():
        started = list(recorder.started)
        return len(b_ids & set(started)) == len(b_ids) or sum(1 for r in started if r in a_ids) >= 200

    wait_until(settled, 60, 0.01, message="tenant b to start, or tenant a to run 200 times")
    started = list(recorder.started)
    a_seen = 0
    b_positions = {}
    for run_id in started:
        if run_id in a_ids:
            a_seen += 1
        elif run_id in b_ids:
            b_positions[run_id] = a_seen  # how many of a's runs had started before it
    assert len(b_positions) == 10, f"only {len(b_positions)} of b's runs started after {a_seen} of a's"
    # Round-robin: b's k-th run should follow about k of a's. Allow double that, and the first batch.
    assert max(b_positions.values()) < 20, f"a's runs started before each of b's: {sorted(b_positions.values())}"
    assert recorder.peak() <= 4


def test_overlap_arithmetic():
    """The measuring stick itself: an end at t frees the slot before a start at t."""
    assert max_overlap([(0, 1), (1, 2), (2, 3)]) == 1
    assert max_overlap([(0, 2), (1, 3), (1.5, 1.6)]) == 3
    assert max_overlap([]) == 0


def test_a_fair_queue_alternates_partitions_when_slots_free_one_at_a_time(make_app, clock):
    """The fair order, claim by claim: each finished run frees one slot of the global cap of 4.

    Partitions must take turns across claims, not only within one claim
    batch: with one free slot per claim, the partition with the older head
    (the big backlog) must not win every time.
    """
    app = make_app(RunQueueConfig(max_concurrent_runs=4))
    app.queue("fair1", concurrency=Concurrency(partition=Partition(by_args=["tenant"])), ordering="fair")

    @app.task(name="g.fair1", queue="fair1")
    def fair1(tenant: str, n: int) -> int:
        return n

    fair1.submit_many([{"tenant": "a", "n": i} for i in range(100)])
    clock.advance(0.01)  # b's runs are strictly younger
    fair1.submit_many([{"tenant": "b", "n": i} for i in range(10)])
    store = app.store
    running = list(store.cycle(CycleRequest("w", ["fair1"], [], [], 8, 60)).claimed)
    order = [run.args["tenant"] for run in running]
    assert sorted(order) == ["a", "a", "b", "b"]  # the first batch takes turns
    while order.count("b") < 10 and len(order) < 60:
        done = running.pop(0)  # the oldest claim finishes first
        outcome = Outcome(done.id, done.attempt, OutcomeKind.COMPLETED, result=0)
        claimed = store.cycle(CycleRequest("w", ["fair1"], [], [outcome], 8, 60)).claimed
        assert len(claimed) == 1  # one slot freed, one taken
        running += claimed
        order.append(claimed[0].args["tenant"])
    b_positions = [order[:i].count("a") for i, tenant in enumerate(order) if tenant == "b"]
    assert len(b_positions) == 10, (
        f"b got {len(b_positions)} of its 10 runs started in {len(order)} claims: {''.join(order)}"
    )
    assert max(b_positions) <= 12, "".join(order)
