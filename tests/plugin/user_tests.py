"""A user's test file (`test_orders.py` in a pytester folder): the plugin as its users meet it.

Not collected here (no `test_` prefix): tests/plugin/test_plugin.py runs it through pytester.
"""

from __future__ import annotations

import pytest
from orders import make_app

import tidegate
import tidegate.testing
from tidegate.testing import DrainRunaway, assert_blocked, assert_submitted, refute_submitted, run_inline


def test_receipt_sent(tidegate_app, tidegate_drain, tidegate_clock):
    app = make_app(tidegate_app.database_url)
    tasks = app.tasks_by_name
    tasks["place_order"].submit(order_id=7, customer_id=7)
    assert tidegate_drain(app).completed == 1  # the order; its receipt is due in an hour
    assert_submitted(app, tasks["send_receipt"], args={"order_id": 7})
    assert tidegate_drain(app).completed == 0
    tidegate_clock.advance("2h")
    results = tidegate_drain(app)
    assert results.completed == 1
    assert results.of("send_receipt")[0].result == {"sent": 7, "pair": [7, 7]}


def test_each_test_has_its_own_database(tidegate_app):
    app = make_app(tidegate_app.database_url)
    refute_submitted(app, "place_order")
    assert app.store.page_runs() == []


def test_app_fixture_is_an_app_on_the_test_clock(tidegate_app, tidegate_clock):
    assert isinstance(tidegate_app, tidegate.App)
    assert tidegate_app.clock is tidegate_clock
    assert make_app(tidegate_app.database_url).clock is tidegate_clock


def test_assert_submitted_filters(tidegate_app):
    app = make_app(tidegate_app.database_url)
    send = app.tasks_by_name["send_receipt"]
    send.submit(order_id=1, customer_id=5)
    send.submit(order_id=2, customer_id=5)
    send.options(tags={"vip": "yes"}).submit(order_id=3, customer_id=6)
    assert len(assert_submitted(app, send, args={"customer_id": 5}, count=2)) == 2
    assert_submitted(app, send, tags={"kind": "receipt", "vip": "yes"}, count=1)
    assert_submitted(app, "send_receipt", queue="emails", count=3)
    refute_submitted(app, send, args={"order_id": 4})
    refute_submitted(app, send, queue="orders")
    with pytest.raises(AssertionError, match=r"expected 1 run of send_receipt with args including \{'customer_id'"):
        assert_submitted(app, send, args={"customer_id": 5}, count=1)
    with pytest.raises(AssertionError, match=r"expected at least 1 run of send_receipt .* found 0 \(runs of"):
        assert_submitted(app, send, args={"order_id": 9})
    with pytest.raises(AssertionError, match=r"expected no run of send_receipt .* found 1: .* queued"):
        refute_submitted(app, send, args={"order_id": 3})


def test_run_inline(tidegate_app):
    app = make_app(tidegate_app.database_url)
    tasks = app.tasks_by_name
    assert run_inline(tasks["send_receipt"], order_id=3) == {"sent": 3, "pair": [3, 0]}  # JSON: a tuple is a list
    assert run_inline(tasks["pair"], a=2) == [2, 2]  # an async task
    with pytest.raises(ZeroDivisionError):  # the task's own error
        run_inline(tasks["divide"], a=1, b=0)
    with pytest.raises(tidegate.ArgumentMismatch, match="divide"):  # what a submit refuses
        run_inline(tasks["divide"], a="one", b=2)
    with pytest.raises(tidegate.InvalidArgument, match="InvalidResult"):  # a set is no JSON: a worker fails it
        run_inline(tasks["clock_reading"])
    refute_submitted(app, "divide")  # nothing was stored


def test_drain_holds_a_queue_limit(tidegate_app, tidegate_drain):
    app = make_app(tidegate_app.database_url)
    app.tasks_by_name["in_lane"].submit_many([{"n": n} for n in range(3)])
    app.tasks_by_name["in_open"].submit_many([{"n": n} for n in range(2)])
    results = tidegate_drain(app, max_workers=4)
    assert results.completed == 5
    assert app.state["open"].most == 2  # four slots: unlimited runs do overlap
    assert app.state["lane"].most == 1  # the lane's limit of 1 holds in the drain


def test_drain_runs_in_claim_order(tidegate_app, tidegate_drain):
    app = make_app(tidegate_app.database_url)
    send = app.tasks_by_name["send_receipt"]
    low = send.submit(order_id=1, customer_id=1)
    high = send.options(priority=5).submit(order_id=2, customer_id=2)
    results = tidegate_drain(app)
    assert [run.id for run in results.runs] == [high.id, low.id]
    assert results.attempts == ((high.id, 1), (low.id, 1))


def test_drain_stops_a_runaway(tidegate_app, tidegate_drain):
    app = make_app(tidegate_app.database_url)
    app.tasks_by_name["forever"].submit(n=0)
    with pytest.raises(DrainRunaway, match=r"ran \d+ attempts \(its cap is 20\)"):
        tidegate_drain(app, cap=20)
    assert len(app.store.page_runs(status=tidegate.RunStatus.COMPLETED)) >= 20


def test_drain_runs_children(tidegate_app, tidegate_drain):
    app = make_app(tidegate_app.database_url)
    app.tasks_by_name["parent"].submit(order_id=5)
    results = tidegate_drain(app)
    assert results.completed == 2
    assert results.of("parent")[0].result == {"sent": 5, "pair": [5, 99]}


def test_retry_backoff_follows_the_clock(tidegate_app, tidegate_drain, tidegate_clock):
    app = make_app(tidegate_app.database_url)
    run = app.tasks_by_name["flaky"].submit()
    first = tidegate_drain(app)
    assert (first.queued, first.completed) == (1, 0)  # backing off: 10 minutes, with jitter 5 to 15
    tidegate_clock.advance("4m")
    assert len(tidegate_drain(app)) == 0
    tidegate_clock.advance("11m")
    assert tidegate_drain(app).completed == 1
    assert run.info().result == "second"


def test_frozen_clock(tidegate_app, tidegate_clock):
    app = make_app(tidegate_app.database_url)
    frozen = tidegate_clock.freeze().now()
    first = app.tasks_by_name["divide"].submit(a=1, b=1)
    tidegate_clock.advance("1m")
    second = app.tasks_by_name["divide"].submit(a=1, b=1)
    gap = (second.info().submitted_at - first.info().submitted_at).total_seconds()
    assert abs((first.info().submitted_at - frozen).total_seconds()) < 0.5
    assert 59.5 < gap < 60.5
    tidegate_clock.resume()
    assert tidegate_clock.now() >= frozen


def test_assert_blocked(tidegate_app, tidegate_drain):
    app = make_app(tidegate_app.database_url)
    send = app.tasks_by_name["send_receipt"]
    seen = []
    later = None

    @app.task(queue="emails", name="hold")
    def hold(customer_id: int) -> None:
        seen.append(tidegate.testing.submitted(app, "send_receipt"))
        tidegate.testing.assert_blocked(app, later, by="queue:emails/customer_id=7")
        with pytest.raises(AssertionError, match=r"not blocked by 'queue:emails/customer_id=8': it is held back by"):
            assert_blocked(app, later, by="queue:emails/customer_id=8")
        seen.append("blocked")

    hold.submit(customer_id=7)
    later = send.submit(order_id=70, customer_id=7)
    assert tidegate_drain(app, max_workers=2).completed == 2
    assert seen[1:] == ["blocked"]
    with pytest.raises(AssertionError, match=r"is not blocked by .*: it is completed"):
        assert_blocked(app, later, by="queue:emails/customer_id=7")


def test_drain_leaves_what_its_limits_hold_back(tidegate_app, tidegate_drain):
    app = make_app(tidegate_app.database_url)
    run = app.tasks_by_name["in_lane"].submit(n=1)
    app.store.set_queue_paused("lane", True)
    assert len(tidegate_drain(app)) == 0  # returns: nothing due can be claimed
    app.store.set_queue_paused("lane", False)
    assert [found.id for found in tidegate_drain(app).runs] == [run.id]


def test_drain_refuses_bad_input(tidegate_app, tidegate_drain):
    app = make_app(tidegate_app.database_url)
    with pytest.raises(tidegate.ConfigurationError, match="cap must be at least 1 attempt, got 0"):
        tidegate_drain(app, cap=0)
    with pytest.raises(tidegate.ConfigurationError, match="max_workers must be an integer from 1"):
        tidegate_drain(app, max_workers=0)
    with pytest.raises(TypeError, match=r"tidegate_drain takes a tidegate\.App"):
        tidegate_drain(tidegate_app.database_url)
