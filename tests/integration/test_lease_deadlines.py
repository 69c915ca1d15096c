"""A holder stops using what it leased before the store could find the lease expired.

A step's pool slots and a worker's runs are given up at (the send of the
request that set the lease) + lease - a margin, on the holder's own clock,
while renewals fail or hang: the sweeper then never hands a slot or a run
to someone else while it is still in use. Each test runs the failing holder
on an App of its own whose store methods are wrapped, beside a healthy
worker that sweeps and takes over; the steps and tasks record monotonic
times, compared with the recorded send of the claim.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.thread_gate import ThreadGate
from tidegate import App, Context, Executor, RunFailed, StoreUnavailable, Workflow

from .conftest import wait_until

LEASE = 0.9  # renewed every 0.3s; the sweep runs every 0.3s too
HANG = 3.0  # how long a hanging renewal blocks (more than the lease) before it fails


class FailingRenewals:
    """Wraps one store method: it fails at once ("raises") or hangs past the lease then fails
    ("hangs"), until `healed` is set."""

    def __init__(self, method: Callable[..., Any], mode: str) -> None:
        self._method = method
        self._mode = mode
        self.healed = threading.Event()
        self.calls = 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.healed.is_set():
            return self._method(*args, **kwargs)
        self.calls += 1
        if self._mode == "hangs":
            self.healed.wait(HANG)
        raise StoreUnavailable("renewal failed (injected)")


def recording_sends(method: Callable[..., Any], sends: list[tuple[float, Any]]) -> Callable[..., Any]:
    """Wraps a store method: appends (monotonic time before the call, its result)."""

    def call(*args: Any, **kwargs: Any) -> Any:
        sent = time.monotonic()
        result = method(*args, **kwargs)
        sends.append((sent, result))
        return result

    return call


@pytest.fixture
def failing_app(database_url: str) -> Iterator[App]:
    """A second App on the same database: its worker's store calls are the ones wrapped."""
    application = App(database_url)
    try:
        yield application
    finally:
        application.close()


@pytest.mark.parametrize("mode", ["raises", "hangs"])
def test_a_step_whose_slot_renewals_fail_stops_before_its_slot_can_be_taken(
    app, failing_app, start_worker, monkeypatch, mode
):
    app.set_pool_limit("db", 1, lease_duration=LEASE)
    log: list[tuple[str, str, float]] = []  # (start | end, run label, monotonic time)

    def define(application: App) -> tuple[Any, Any]:
        @application.step(pool="db")
        async def use_db(label: str) -> str:
            log.append(("start", label, time.monotonic()))
            try:
                await asyncio.sleep(5 if label == "held" else 0.05)
            finally:
                log.append(("end", label, time.monotonic()))
            return label

        parallel = Executor.parallel(max_async_concurrent=2)

        @application.workflow(name="t.held", queue="held", executor=parallel)
        def held(wf: Workflow) -> Any:
            return wf.step(use_db, "held")

        @application.workflow(name="t.next", queue="next", executor=parallel)
        def next_(wf: Workflow) -> Any:
            return wf.step(use_db, "next")

        return held, next_

    held, _ = define(failing_app)
    _, next_ = define(app)
    store = failing_app.store
    renewals = FailingRenewals(store.renew_slots, mode)
    claims: list[tuple[float, Any]] = []
    monkeypatch.setattr(store, "renew_slots", renewals)
    monkeypatch.setattr(store, "acquire_slots", recording_sends(store.acquire_slots, claims))

    failing = failing_app.worker(queues=["held"], max_workers=1, lease_duration=LEASE).start()
    try:
        held_run = held.submit()
        wait_until(lambda: any(entry[:2] == ("start", "held") for entry in log), 30, message="the held step to start")
        start_worker(app, queues=["next"], lease_duration=LEASE)
        next_run = next_.submit()
        assert next_run.wait(timeout=30) == "next"
        with contextlib.suppress(RunFailed):  # checked below, after the times
            held_run.wait(timeout=30)
    finally:
        renewals.healed.set()
        failing.stop(timeout=30, grace=0)
        assert failing.join(30)

    times = {(kind, label): at for kind, label, at in log}
    claim_sent = max(sent for sent, grant in claims if grant.granted and sent < times["start", "held"])
    assert renewals.calls > 0, "no renewal was even tried"
    assert times["end", "held"] <= claim_sent + LEASE, (
        f"the held step ran {times['end', 'held'] - claim_sent:.3f}s after its claim was sent, past its "
        f"{LEASE}s lease: the sweeper could free its slot while it still ran"
    )
    assert times["end", "held"] <= times["start", "next"], "two steps ran at once on a pool of limit 1"
    with pytest.raises(RunFailed, match="SlotsLost"):
        held_run.wait(timeout=5)


def test_a_worker_whose_lease_renewals_hang_stops_its_attempt_before_the_lease_ends(
    app, failing_app, start_worker, monkeypatch
):
    log: list[tuple[str, int, float, str]] = []  # (start | end, attempt, monotonic time, stop reason)

    def define(application: App) -> Any:
        @application.task(name="t.leased", queue="leased", max_attempts=3)
        def leased(ctx: Context) -> int:
            log.append(("start", ctx.attempt, time.monotonic(), ""))
            try:  # AttemptInterrupted (a BaseException) may land anywhere in here
                give_up = time.monotonic() + (5 if ctx.attempt == 1 else 0.1)
                while not ctx.cancelled and time.monotonic() < give_up:
                    time.sleep(0.005)
            finally:
                log.append(("end", ctx.attempt, time.monotonic(), ctx.cancel_reason or ""))
            return ctx.attempt

        return leased

    leased = define(failing_app)
    define(app)
    store = failing_app.store
    renewals = FailingRenewals(store.renew_leases, "hangs")
    cycles: list[tuple[float, Any]] = []
    monkeypatch.setattr(store, "renew_leases", renewals)
    monkeypatch.setattr(store, "cycle", recording_sends(store.cycle, cycles))

    failing = failing_app.worker(queues=["leased"], max_workers=1, lease_duration=LEASE).start()
    try:
        run = leased.submit()
        wait_until(lambda: any(entry[:2] == ("start", 1) for entry in log), 30, message="attempt 1 to start")
        start_worker(app, queues=["leased"], max_workers=1, lease_duration=LEASE)
        assert run.wait(timeout=30) >= 2
    finally:
        renewals.healed.set()
        failing.stop(timeout=30, grace=0)
        assert failing.join(30)

    times = {(kind, attempt): (at, reason) for kind, attempt, at, reason in log}
    [claim_sent] = [sent for sent, result in cycles if any(claimed.attempt == 1 for claimed in result.claimed)]
    end, reason = times["end", 1]
    assert renewals.calls > 0, "no renewal was even tried"
    assert reason == "heartbeat lost"
    assert end <= claim_sent + LEASE, (
        f"attempt 1 ran {end - claim_sent:.3f}s after its claim was sent, past its {LEASE}s lease, "
        "while its renewal hung: the sweeper could hand its run to another worker while it still ran"
    )
    assert end <= times["start", 2][0], "two attempts of one run ran at once"


def test_a_step_handed_slots_whose_renewals_fail_stops_before_their_lease_could_end(app, start_worker, monkeypatch):
    app.set_pool_limit("db", 1, lease_duration=LEASE)
    log: list[tuple[str, int, float]] = []  # (start | end, n, monotonic time)
    one_started = ThreadGate()

    @app.step(pool="db")
    async def use_db(n: int, after: int = 0) -> int:
        log.append(("start", n, time.monotonic()))
        one_started.set()
        try:
            await asyncio.sleep(0.3 if n == 1 else 5)  # the first one ends well within its lease
        finally:
            log.append(("end", n, time.monotonic()))
        return n

    @app.step()
    async def first_started() -> int:
        """Lets the second step ask for the slot only once the first holds it: it then waits for it."""
        await one_started.wait_async(10)
        return 0

    @app.step()
    def both(a: int, b: int) -> int:
        return a + b

    @app.workflow(name="t.handed", executor=Executor.parallel(max_async_concurrent=3))
    def handed(wf: Workflow) -> Any:
        return wf.step(both, wf.step(use_db, 1), wf.step(use_db, 2, after=wf.step(first_started)))

    store = app.store
    renewals = FailingRenewals(store.renew_slots, "raises")
    finishes: list[tuple[float, Any]] = []
    monkeypatch.setattr(store, "renew_slots", renewals)
    monkeypatch.setattr(store, "finish_step", recording_sends(store.finish_step, finishes))
    start_worker(lease_duration=LEASE)
    run = handed.submit()
    try:
        with contextlib.suppress(RunFailed):  # checked below, after the times
            run.wait(timeout=30)
    finally:
        renewals.healed.set()

    times = {(kind, n): at for kind, n, at in log}
    assert [entry[:2] for entry in log[:2]] == [("start", 1), ("end", 1)], log
    assert times["end", 1] <= times["start", 2], "two steps ran at once on a pool of limit 1"
    handed_at = min(sent for sent, finish in finishes if finish.handed is not None)  # the first step's finish
    assert times["end", 2] <= handed_at + LEASE, (
        f"the step handed the slot ran {times['end', 2] - handed_at:.3f}s after the hand-off was sent, past "
        f"the {LEASE}s lease, while renewals failed"
    )
    claims = [event.metadata for event in app.store.run_events(run.id) if event.type == "StepSlotClaimed"]
    assert any("handed_from" in claim for claim in claims), f"the slot was not handed on in memory: {claims}"
    with pytest.raises(RunFailed, match="SlotsLost"):
        run.wait(timeout=5)


class HealsOnThirdCall(FailingRenewals):
    """Fails at once until its third call, which heals it (and still fails): the next turn of
    maintenance is then a whole renewal interval away."""

    healed_at = 0.0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not self.healed.is_set() and self.calls == 2:
            self.calls += 1
            self.healed_at = time.monotonic()
            self.healed.set()
            raise StoreUnavailable("renewal failed (injected)")
        return super().__call__(*args, **kwargs)


def test_a_worker_whose_heartbeat_lapsed_claims_again_as_soon_as_one_lands(failing_app, monkeypatch):
    """While its heartbeat could have lapsed a worker claims nothing (a run claimed then could be
    rescued from it at once); it asks for a heartbeat on its next turn instead of waiting a third
    of the lease for maintenance, so work resumes as soon as the store answers again."""
    lease = 3.0  # renewed every 1s; the heartbeat counts as lapsed 2.4s after the last one landed
    started: list[float] = []

    @failing_app.task(name="t.after_lapse", queue="lapse")
    def after_lapse() -> None:
        started.append(time.monotonic())

    store = failing_app.store
    heartbeats = HealsOnThirdCall(store.heartbeat_worker, "raises")
    monkeypatch.setattr(store, "heartbeat_worker", heartbeats)
    worker = failing_app.worker(queues=["lapse"], max_workers=1, lease_duration=lease, poll_interval="100ms").start()
    try:
        wait_until(heartbeats.healed.is_set, 30, message="the heartbeat to fail twice and heal")
        after_lapse.submit()
        wait_until(lambda: started, 30, message="the run to start")
    finally:
        worker.stop(timeout=30, grace=0)
        assert worker.join(30)
    waited = started[0] - heartbeats.healed_at
    assert waited < lease / 3 / 2, (
        f"the run started {waited:.2f}s after the store answered again: the worker waited for "
        "maintenance's next turn instead of asking for a heartbeat"
    )
