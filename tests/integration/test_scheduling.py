"""Delayed runs (`run_at`): never claimed before they are due, and not forgotten after."""

from datetime import UTC, datetime, timedelta

import pytest

from tidegate import InvalidArgument, RunStatus
from tidegate.domain.model import CycleRequest


def _dequeued_at(app, run_id):
    return next(event.at for event in app.store.run_events(run_id) if event.type == "RunDequeued")


@pytest.mark.parametrize("form", ["timedelta", "aware-datetime", "naive-datetime"])
def test_a_delayed_run_is_not_claimed_before_it_is_due(app, start_worker, clock, form):
    @app.task(name="t.when")
    def when() -> str:
        return "ran"

    @app.task(name="t.now")
    def now_task() -> str:
        return "now"

    start_worker()
    delay = timedelta(seconds=2.5)
    if form == "timedelta":
        run_at = delay
    elif form == "aware-datetime":
        run_at = datetime.now(UTC) + delay
    else:
        run_at = datetime.now() + delay  # local time, like datetime.now() users write
    delayed = when.options(run_at=run_at).submit()
    immediate = now_task.submit()
    # a due run is not held up behind the delayed one
    assert immediate.wait(timeout=30) == "now"
    # while it is not due, no claim takes it (the worker's turns make this same call)
    clock.advance(2.0)
    assert app.store.cycle(CycleRequest("probe", [delayed.info().queue], [], [], 1, 30)).claimed == []
    assert delayed.status() is RunStatus.QUEUED
    clock.advance(0.5)
    now_task.submit()  # a submit wakes the worker now; its own timer for the due run runs on real time
    assert delayed.wait(timeout=30) == "ran"
    record = delayed.info()
    # the store's own clock says it was dequeued no earlier than it was scheduled
    assert _dequeued_at(app, delayed.id) >= record.scheduled_at
    assert (record.scheduled_at - record.submitted_at).total_seconds() == pytest.approx(2.5, abs=0.5)


def test_a_worker_wakes_for_a_due_run_without_polling(app, start_worker):
    """With a 30 s poll, a run due in 1 s is still run: the worker sleeps until the next due time."""

    @app.task(name="t.later")
    def later() -> str:
        return "done"

    start_worker(poll_interval="30s")
    handle = later.options(run_at=timedelta(seconds=1)).submit()
    assert handle.wait(timeout=15) == "done"
    assert _dequeued_at(app, handle.id) >= handle.info().scheduled_at


def test_delayed_runs_keep_their_order_by_due_time(tidegate_app, tidegate_clock, tidegate_drain):
    app, order = tidegate_app, []

    @app.task(name="t.ordered")
    def ordered(n: int) -> int:
        order.append(n)
        return n

    for n in range(3):
        ordered.options(run_at=timedelta(seconds=0.4 * (3 - n))).submit(n=n)
    assert len(tidegate_drain(app)) == 0  # none is due yet
    tidegate_clock.advance(1.2)  # all due: claims take them by due time, not by submission
    assert tidegate_drain(app).completed == 3
    assert order == [2, 1, 0]


def test_a_run_at_in_the_past_is_due_now(tidegate_app, tidegate_drain):
    @tidegate_app.task(name="t.past")
    def past() -> int:
        return 1

    handle = past.options(run_at=datetime.now(UTC) - timedelta(hours=1)).submit()
    assert [run.result for run in tidegate_drain(tidegate_app).runs] == [1]
    assert handle.wait(timeout=0) == 1


def test_run_at_of_the_wrong_type_is_refused(app):
    @app.task(name="t.bad_when")
    def bad_when() -> int:
        return 1

    with pytest.raises(InvalidArgument, match="run_at"):
        bad_when.options(run_at=5).submit()  # type: ignore[arg-type]
    assert app.store.page_runs() == []


def test_a_delayed_run_can_be_canceled_before_it_is_due(tidegate_app, tidegate_clock, tidegate_drain):
    ran = []

    @tidegate_app.task(name="t.cancel_later")
    def cancel_later() -> None:
        ran.append(True)

    handle = cancel_later.options(run_at=timedelta(seconds=1)).submit()
    assert handle.cancel() is RunStatus.CANCELED
    tidegate_clock.advance(1.5)  # past its due time: still nothing may claim it
    assert len(tidegate_drain(tidegate_app)) == 0
    assert ran == []
    assert handle.status() is RunStatus.CANCELED
