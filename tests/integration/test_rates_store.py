"""Rates charged by the store: in the claim's transaction, on the database's clock, per partition.

On both backends: each adapter reads and writes the rate states in its own SQL
(tidegate_rate_states), and the rate partition is stored on the run at submit.
"""

from __future__ import annotations

import time

import pytest

from tests.support.racing_claims import claimed_together
from tidegate import App, Partition, Rate
from tidegate.domain.clock import ShiftedClock
from tidegate.domain.errors import ConfigurationError
from tidegate.domain.model import CycleRequest


def _claimed(app: App, limit: int = 10) -> list[str]:
    return [run.id for run in app.store.cycle(CycleRequest("w1", ["api"], [], [], limit, 60)).claimed]


def test_a_rate_bounds_the_starts_per_window_across_claims(app: App, clock: ShiftedClock) -> None:
    # A minute's window: the shifted clock also moves with real time, which a loaded machine stretches.
    app.queue("api", rate=Rate(limit=3, per="1m", burst=3))
    call = app.task(name="call", queue="api")(lambda: None)
    runs = [call.submit().id for _ in range(5)]
    assert _claimed(app) == runs[:3]  # the burst
    assert _claimed(app) == []  # a second claim at the same time finds the window spent
    blocked = app.store.get_run(runs[3])
    assert blocked is not None and blocked.block_reason is not None
    assert blocked.block_reason[0]["scope"] == "rate:api"
    clock.advance(40)
    assert _claimed(app) == []  # not yet a minute since the burst
    clock.advance(21)
    # A new window, but a burst of the whole limit leaves a sustained rate of one per minute
    # (limit + 1 - burst: docs/rates.md): the state was stored, not forgotten.
    assert _claimed(app) == runs[3:4]


def test_each_partition_of_a_rate_has_its_own_budget(app: App, clock: ShiftedClock) -> None:
    app.queue("api", rate=Rate(limit=1, per="1m"), rate_partition=Partition(by_args=["key"]))
    call = app.task(name="call", queue="api")(lambda key: None)
    a1, a2, b1 = call.submit(key="a").id, call.submit(key="a").id, call.submit(key="b").id
    assert _claimed(app) == [a1, b1]  # a's second run waits; b's is not held behind it
    run = app.store.get_run(a2)
    assert run is not None and run.block_reason is not None
    assert run.block_reason[0]["scope"] == "rate:api/key=a"
    clock.advance(61)
    assert _claimed(app) == [a2]


@pytest.mark.parametrize(
    "rate",
    [
        {"limit": 0, "per": "1s"},
        {"limit": -1, "per": "1s"},
        {"limit": 5, "per": "soon"},
        {"limit": 5, "per": "1s", "burst": 6},
    ],
)
def test_a_bad_rate_is_refused_when_the_queue_is_declared(app: App, rate: dict[str, object]) -> None:
    with pytest.raises(ConfigurationError, match=r"Rate\.(limit|per|burst)"):
        app.queue("api", rate=Rate(**rate))  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="rate_partition needs a rate"):
        app.queue("api", rate_partition=Partition(by_args=["key"]))
    with pytest.raises(ConfigurationError, match="expected Rate"):
        app.queue("api", rate=[5])  # type: ignore[list-item]


def test_concurrent_claimers_never_take_past_the_rate_together(app: App, database_url: str) -> None:
    """Two stores claim at once, each its own connection: the claim turn (PostgreSQL) or the one
    writer (SQLite) serializes their charges, so together they take the burst and no more."""
    app.queue("api", rate=Rate(limit=5, per="1h", burst=5))
    call = app.task(name="call", queue="api")(lambda: None)
    for _ in range(20):
        call.submit()
    claimed = claimed_together(database_url, ["api", "api"], limit=4)
    assert len(claimed) == 5 and len(set(claimed)) == 5


def test_a_claim_held_back_by_a_rate_says_when_to_come_back_not_to_claim_again(app: App) -> None:
    app.queue("api", rate=Rate(limit=2, per="10s", burst=1))
    call = app.task(name="call", queue="api")(lambda: None)
    for _ in range(3):
        call.submit()
    charged = time.monotonic()
    result = app.store.cycle(CycleRequest("w1", ["api"], [], [], 1, 60))
    assert len(result.claimed) == 1
    again = app.store.cycle(CycleRequest("w1", ["api"], [], [], 1, 60))
    taken = time.monotonic() - charged
    assert again.claimed == [] and not again.more
    # burst 1: one start every 10s / 2, less the time taken since the first claim (however slow the machine)
    assert again.next_allowed_in is not None and 5.0 - taken - 0.1 <= again.next_allowed_in <= 5.0


def test_a_worker_waits_for_the_next_token_not_for_its_poll(app: App, start_worker: object) -> None:
    """A drain at a rate is paced by the rate: with a poll of an hour, 4 runs at one per 0.2 s end
    within the minute's wait only if the worker sleeps until the store's next allowed start."""

    from tests.conftest import wait_until

    app.queue("api", rate=Rate(limit=5, per="1s", burst=1))
    call = app.task(name="call", queue="api")(lambda: None)
    runs = [call.submit() for _ in range(4)]
    start_worker(queues=["api"], poll_interval="1h", max_workers=4)  # type: ignore[operator]
    # The rate alone needs 0.6 s, a stalled machine some more; the poll would need 3 hours.
    wait_until(lambda: all(run.status().value == "completed" for run in runs), timeout=60, message="the 4 runs")


def test_one_keys_rate_blocked_backlog_does_not_hide_another_keys_run(app: App, clock: ShiftedClock) -> None:
    """200 runs of key a wait for a's rate (one start a minute); b's run, queued behind them all,
    is claimed by the next cycle: the read steps over a's runs as over a full partition."""
    app.queue("api", rate=Rate(limit=1, per="1m"), rate_partition=Partition(by_args=["key"]))
    call = app.task(name="call", queue="api")(lambda key: None)
    first = call.submit(key="a").id
    assert _claimed(app, 1) == [first]
    for _ in range(200):
        call.submit(key="a")
    assert _claimed(app, 1) == []  # a's rate holds every one of them back
    b = call.submit(key="b").id
    assert _claimed(app, 1) == [b]
