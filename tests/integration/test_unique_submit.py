"""Once per key (issue 26): `Unique` on a task, unique and idempotency keys at submit, on both adapters."""

import time

import pytest

from tidegate import AdmissionRejected, DuplicateRun, InvalidArgument, RunStatus, Unique

from .conftest import execute_sql as query_rows


def _runs(app):
    return app.store.page_runs()


def test_a_second_submit_of_a_key_returns_the_first_run(app):
    @app.task(name="u.refresh", unique=Unique(by_args=["customer_id"]))
    def refresh(customer_id: int, note: str = "") -> None:
        return None

    first = refresh.submit(customer_id=3, note="a")
    second = refresh.submit(customer_id=3, note="b")
    other = refresh.submit(customer_id=4)
    assert second.id == first.id and second.duplicate and not first.duplicate
    assert other.id != first.id and not other.duplicate
    assert first.info().args == {"customer_id": 3, "note": "a"}  # "existing" keeps the first args


def test_a_failed_or_canceled_run_frees_its_key(app, start_worker):
    @app.task(name="u.fails", unique=Unique())
    def fails(x: int) -> None:
        raise RuntimeError("no")

    first = fails.submit(x=1)
    assert first.cancel() is RunStatus.CANCELED
    second = fails.submit(x=1)
    assert second.id != first.id and not second.duplicate
    start_worker()
    with pytest.raises(Exception, match="no"):
        second.wait(timeout=30)
    third = fails.submit(x=1)
    assert third.id not in (first.id, second.id) and not third.duplicate


def test_a_completed_run_holds_its_key_only_within_period(app, start_worker, clock):
    @app.task(name="u.daily", unique=Unique(period="1h"))
    def daily(x: int) -> int:
        return x

    @app.task(name="u.plain", unique=Unique())
    def plain(x: int) -> int:
        return x

    start_worker()
    held = daily.submit(x=1)
    free = plain.submit(x=1)
    assert held.wait(timeout=30) == 1 and free.wait(timeout=30) == 1
    assert daily.submit(x=1).id == held.id  # completed, within the hour
    assert plain.submit(x=1).id != free.id  # completed, no period: the key is free
    clock.advance(3601)
    again = daily.submit(x=1)
    assert again.id != held.id and not again.duplicate


def test_on_conflict_raise_and_replace(app):
    @app.task(name="u.raise", unique=Unique(on_conflict="raise"))
    def strict(x: int) -> None:
        return None

    @app.task(name="u.replace", unique=Unique(by_args=["doc"], on_conflict="replace"))
    def reindex(doc: int, version: int) -> None:
        return None

    first = strict.submit(x=1)
    with pytest.raises(DuplicateRun) as raised:
        strict.submit(x=1)
    assert raised.value.run_id == first.id and raised.value.handle.id == first.id
    one = reindex.submit(doc=7, version=1)
    two = reindex.submit(doc=7, version=2)
    assert two.id == one.id and two.duplicate
    assert one.info().args == {"doc": 7, "version": 2}


def test_a_batch_meets_its_own_keys_and_a_refused_batch_takes_none(app, database_url):
    app.queue("u.capped", max_active=2)

    @app.task(name="u.batch", queue="u.capped", unique=Unique(by_args=["k"], on_conflict="replace"))
    def batch(k: int, v: int) -> None:
        return None

    handles = batch.submit_many([{"k": 1, "v": 1}, {"k": 1, "v": 2}, {"k": 2, "v": 1}])
    assert handles[1].id == handles[0].id and handles[1].duplicate
    assert handles[0].info().args == {"k": 1, "v": 2}  # the last submit of the key in the batch wins
    assert len(_runs(app)) == 2
    with pytest.raises(AdmissionRejected):  # a ceiling kept: nothing stored, no key taken
        batch.submit_many([{"k": 3, "v": 1}])
    assert len(_runs(app)) == 2
    assert query_rows(database_url, "SELECT count(*) FROM tidegate_unique_keys")[0][0] == 2


def test_idempotency_keys_and_unique_keys_at_submit(app, clock):
    @app.task(name="u.receipt")
    def receipt(order_id: int) -> None:
        return None

    first = receipt.options(idempotency_key="order-7", idempotency_ttl="24h").submit(order_id=7)
    second = receipt.options(idempotency_key="order-7").submit(order_id=8)
    assert second.id == first.id and second.duplicate
    keyed = receipt.options(unique_key="k").submit(order_id=1)
    assert receipt.options(unique_key="k").submit(order_id=2).id == keyed.id
    by_name = app.submit("u.receipt", {"order_id": 9}, unique_key="k")
    assert by_name.id == keyed.id and by_name.duplicate


def test_by_queue_keys_runs_of_each_queue_apart(app):
    app.queue("u.a")
    app.queue("u.b")

    @app.task(name="u.q", queue="u.a", unique=Unique(by_queue=True))
    def q(x: int) -> None:
        return None

    a = q.submit(x=1)
    b = q.options(queue="u.b").submit(x=1)
    assert a.id != b.id and q.submit(x=1).id == a.id


def test_debounce_holds_the_run_and_keeps_the_last_args_within_max_wait(app, clock):
    @app.task(name="u.debounced", unique=Unique(by_args=["doc"], debounce="5s", max_wait="12s"))
    def reindex(doc: int, version: int) -> None:
        return None

    first = reindex.submit(doc=1, version=1)
    submitted = first.info().submitted_at
    assert (first.info().scheduled_at - submitted).total_seconds() == pytest.approx(5, abs=0.5)
    for version in range(2, 5):
        clock.advance(3)
        assert reindex.submit(doc=1, version=version).id == first.id
    record = first.info()
    assert record.args == {"doc": 1, "version": 4}
    # three pushes of 3 s: due 5 s after the last (at 14 s) is past max_wait, so due at 12 s
    assert (record.scheduled_at - submitted).total_seconds() == pytest.approx(12, abs=0.5)


def test_a_burst_of_submits_with_a_worker_runs_once_with_the_last_args_between_debounce_and_max_wait(app, start_worker):
    """50 submits of one key over 3 s, a real worker polling all along: one run, the last args,
    started no sooner than the debounce after the last submit, and no later than max_wait after
    the first (with the worker's pick-up as slack). The debounce is short to keep the test fast."""
    debounce, max_wait = 0.5, 5.0

    @app.task(name="u.burst", unique=Unique(by_args=["doc"], debounce=debounce, max_wait=max_wait))
    def reindex(doc: int, version: int) -> int:
        return version

    start_worker(poll_interval="50ms")
    handles = []
    for version in range(1, 51):
        handles.append(reindex.submit(doc=1, version=version))
        time.sleep(3.0 / 50)
    last_submit = time.time()
    assert {handle.id for handle in handles} == {handles[0].id}
    assert handles[0].wait(timeout="10s") == 50  # the last args won
    record = handles[0].info()
    assert len(_runs(app)) == 1
    first_submit = record.submitted_at.timestamp()
    started = record.started_at.timestamp()
    assert started >= last_submit - 3.0 / 50 + debounce - 0.05  # held for the debounce after the last submit
    assert started - first_submit <= max_wait + 1.0  # never past max_wait (one second for the pick-up)


@pytest.mark.parametrize(
    ("unique", "message"),
    [
        (Unique(by_args=["nope"]), "by_args names arguments the task does not have: nope"),
        (Unique(debounce="1m", max_wait="5s"), "debounce (1m) is longer than max_wait (5s)"),
        (Unique(states=["failed"]), "states must be some of queued, running, waiting"),
        (Unique(on_conflict="skip"), "on_conflict must be one of existing, raise, replace"),
        (Unique(period="90d"), "period: '90d' is out of range"),
    ],
)
def test_a_bad_unique_rule_is_refused_at_declaration(app, unique, message):
    with pytest.raises(InvalidArgument, match=message.replace("(", r"\(").replace(")", r"\)")):

        @app.task(name="u.bad", unique=unique)
        def bad(x: int) -> None:
            return None


def test_bad_keys_at_submit_store_nothing(app, database_url):
    @app.task(name="u.keys")
    def keys(x: int) -> None:
        return None

    with pytest.raises(InvalidArgument, match="idempotency_ttl: '90d' is out of range"):
        keys.options(idempotency_key="a", idempotency_ttl="90d").submit(x=1)
    with pytest.raises(InvalidArgument, match="idempotency_ttl needs an idempotency_key"):
        keys.options(idempotency_ttl="1h").submit(x=1)
    with pytest.raises(InvalidArgument, match="unique_key must be a non-empty string"):
        keys.options(unique_key="").submit(x=1)
    assert _runs(app) == []
