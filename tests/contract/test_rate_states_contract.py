"""`rate_states`: the stored rate states that may still hold a start back, at the database's time."""

from __future__ import annotations

from tidegate import App, Rate
from tidegate.domain.clock import ShiftedClock
from tidegate.domain.model import CycleRequest
from tidegate.domain.rates import NS, to_ns


def test_rate_states_reads_the_charged_windows_until_their_time_has_passed(app: App, clock: ShiftedClock) -> None:
    app.queue("api", rate=[Rate(limit=2, per="1s", burst=1), Rate(limit=10, per="1m", burst=1)])
    call = app.task(name="call", queue="api")(lambda: None)
    store = app.store
    assert store.rate_states().states == {}
    call.submit()
    assert [run.id for run in store.cycle(CycleRequest("w1", ["api"], [], [], 5, 60)).claimed]
    read = store.rate_states()
    assert abs(read.now - clock.wall()) < 5  # the database's time (the test clock's, shifted)
    assert set(read.states) == {("rate:api", NS), ("rate:api", 60 * NS)}
    assert all(tat > to_ns(read.now) for tat in read.states.values())
    clock.advance(1)  # the 1 s window's state (half a second on) has passed; the minute's has not
    assert set(store.rate_states().states) == {("rate:api", 60 * NS)}
    clock.advance(60)
    assert store.rate_states().states == {}
