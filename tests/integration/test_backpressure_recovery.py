"""Self-healing dispatch: heartbeat loss stops a worker's attempts itself; a crash's orphans are recovered.

Heartbeat loss: when a worker cannot reach the store, its leases will lapse
and the sweeper will hand its runs to another worker. It must stop those
attempts *before* that can happen, so that one run never executes twice at
the same time (at-least-once, never at-once-twice).

Orphans: rows exactly as a crashed worker leaves them (running, started or
not, holder rows, a registry row whose heartbeat stopped) are re-queued by
the first sweep, without any new submit, keeping `submitted_at`.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from tidegate import Concurrency, Context, RunStatus, StoreUnavailable
from tidegate.domain.model import CycleRequest, WorkerRegistration

from .conftest import event_types, execute_sql, wait_until

LEASE = 1.5
SAFETY_MARGIN = LEASE / 10


class UnreachableStore:
    """Wraps a store; once `cut` is set every call fails as if the database were unreachable.

    Records the wall-clock time just before each successful lease renewal
    that renewed something: the lease then expires no earlier than that
    time + the lease duration (the store stamps it with its own later now).
    """

    PASS_THROUGH = frozenset({"listen", "close", "url"})

    def __init__(self, store) -> None:
        self._store = store
        self.cut = threading.Event()
        self.renewals: list[float] = []

    def __getattr__(self, name):
        attribute = getattr(self._store, name)
        if name in self.PASS_THROUGH or not callable(attribute):
            return attribute

        def call(*args, **kwargs):
            if self.cut.is_set():
                raise StoreUnavailable(f"{name}: database unreachable (injected)")
            before = time.time()
            result = attribute(*args, **kwargs)
            if name == "renew_leases" and args[1]:
                self.renewals.append(before)
            return result

        return call


def _log(path: Path, line: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def _intervals(path: Path) -> dict[int, dict[str, object]]:
    attempts: dict[int, dict[str, object]] = {}
    for line in path.read_text().splitlines():
        kind, attempt, at, *reason = line.split(" ", 3)
        entry = attempts.setdefault(int(attempt), {})
        entry[kind] = float(at)
        if kind == "end":
            entry["reason"] = reason[0] if reason else ""
    return attempts


def test_heartbeat_loss_stops_the_attempt_before_its_lease_expires(app, start_worker, tmp_path):
    side = tmp_path / "executions.log"

    @app.task(name="hb.long", queue="hb", max_attempts=3)
    def long(ctx: Context) -> int:
        _log(side, f"start {ctx.attempt} {time.time():.6f}")
        reason = ""
        try:  # AttemptInterrupted (a BaseException) may land anywhere in here: log the end regardless
            if ctx.attempt == 1:
                give_up = time.monotonic() + 30
                while not ctx.cancelled and time.monotonic() < give_up:
                    time.sleep(0.005)
            else:
                time.sleep(0.2)
        finally:
            if ctx.cancelled:
                reason = ctx.cancel_reason or "cancelled"
            _log(side, f"end {ctx.attempt} {time.time():.6f} {reason}".rstrip())
        return ctx.attempt

    cut_off = app.worker(queues=["hb"], max_workers=1, lease_duration=f"{LEASE}s")
    proxy = UnreachableStore(app.store)
    cut_off._store = proxy  # every store call of this worker (loop, renewals, sweeps) goes through the proxy
    cut_off.start()
    try:
        assert not cut_off.join(0)
        handle = long.submit()
        wait_until(lambda: side.exists() and "start 1" in side.read_text(), 30, message="attempt 1 to start")
        rescuer = start_worker(app, queues=["hb"], max_workers=1, lease_duration=f"{LEASE}s")
        started = time.time()
        wait_until(lambda: any(t > started for t in proxy.renewals), 30, message="a lease renewal")
        proxy.cut.set()
        cut_at = time.time()

        assert handle.wait(timeout=60) == 2  # the rescuer ran it again once the lease was gone
        attempts = _intervals(side)
        assert set(attempts) == {1, 2}, attempts
        first, second = attempts[1], attempts[2]
        assert "end" in first and first["end"] <= second["start"], (
            f"two executions of one run overlapped: attempt 1 {first}, attempt 2 {second}"
        )
        assert first["reason"] == "heartbeat lost", first
        lease_expiry_at_least = max(proxy.renewals) + LEASE
        assert cut_at < first["end"], "the attempt stopped before the store became unreachable"
        # Before, with room to spare: stopping at the very instant the lease lapses races the
        # sweeper. The design stops after (lease - renewal interval) of silence, a whole
        # renewal interval (lease/3) early; a tenth of the lease is asked for here.
        assert first["end"] <= lease_expiry_at_least - SAFETY_MARGIN, (
            f"attempt 1 was stopped {first['end'] - lease_expiry_at_least:+.3f}s relative to the earliest "
            f"moment its lease could expire (last renewal at {max(proxy.renewals):.3f}, lease {LEASE}s); "
            f"it must stop at least {SAFETY_MARGIN}s before, or the sweeper may hand it to another worker "
            "while it still runs"
        )
        assert "end" in second and rescuer.completed == 1
        record = handle.info()
        assert record.status is RunStatus.COMPLETED and record.attempt == 2
    finally:
        proxy.cut.clear()
        cut_off.stop(timeout=30, grace=0)
        assert cut_off.join(30)


# --- orphans ---------------------------------------------------------------------------------------


DEAD_TTL = 30  # the heartbeat TTL of the workers that die here: the clock moves past it


def _age_holders(database_url, run_id):
    """Make a run's holder rows look old (expired at its submission) while its lease is fine:
    a state no clock produces, since a renewal extends both. SQLite only: on PostgreSQL a run's
    own holders are its row (0030_run_scopes.sql), their expiry is its lease, and this changes nothing."""
    execute_sql(
        database_url,
        "UPDATE tidegate_holders SET expires_at = (SELECT submitted_at FROM tidegate_runs WHERE id = ?) "
        "WHERE run_id = ?",
        (run_id, run_id),
    )


def _holders(database_url, run_id):
    return execute_sql(database_url, "SELECT scope FROM tidegate_slot_holders WHERE run_id = ?", (run_id,))


@pytest.mark.parametrize("recovery", ["one sweep", "a fresh worker"])
def test_a_crashed_workers_rows_are_recovered_at_the_first_sweep(app, database_url, clock, start_worker, recovery):
    app.queue("orph", concurrency=Concurrency(global_limit=5))  # limited: claims write holder rows

    @app.task(name="orph.job", queue="orph", max_attempts=3)
    def job(n: int) -> int:
        return n

    store = app.store
    handles = [job.submit(n=n) for n in range(3)]
    submitted = {handle.id: handle.info().submitted_at for handle in handles}

    # The dead worker: registered, claimed two runs with leases that would last five more minutes,
    # reported the start of one of them (the other was claimed but never started), then vanished.
    store.register_worker(WorkerRegistration("dead-1", 2, ["orph"], False, DEAD_TTL))
    claimed = store.cycle(CycleRequest("dead-1", ["orph"], [], [], 2, 300)).claimed
    assert len(claimed) == 2
    started_run, unstarted_run = claimed
    store.cycle(CycleRequest("dead-1", ["orph"], [(started_run.id, started_run.attempt)], [], 0, 300))
    # A live worker holds the third run; its holder row looks old, but its heartbeat and lease are fine.
    store.register_worker(WorkerRegistration("alive-1", 1, ["orph"], False, 300))
    [alive_run] = store.cycle(CycleRequest("alive-1", ["orph"], [], [], 1, 300)).claimed
    store.cycle(CycleRequest("alive-1", ["orph"], [(alive_run.id, alive_run.attempt)], [], 0, 300))

    clock.advance(2 * DEAD_TTL)  # dead-1's heartbeat stopped; alive-1's and every lease still hold
    for run in (started_run, unstarted_run, alive_run):
        _age_holders(database_url, run.id)
    assert app.run(started_run.id).info().started_at is not None
    assert app.run(unstarted_run.id).info().started_at is None
    assert app.store.scope_usage().get("queue:orph") == 3

    orphans = {started_run.id, unstarted_run.id}
    if recovery == "one sweep":
        report = store.sweep("sweeper-1", 1.0)
        assert report is not None and set(report.requeued) == orphans, report
        assert report.failed == []
        for run_id in orphans:
            record = app.run(run_id).info()
            assert record.status is RunStatus.QUEUED and record.worker_id is None and record.attempt == 1
            assert _holders(database_url, run_id) == []
        assert execute_sql(database_url, "SELECT id FROM tidegate_workers WHERE id = 'dead-1'") == []
        worker = start_worker(app, queues=["orph"], max_workers=2)
    else:
        worker = start_worker(app, queues=["orph"], max_workers=2)  # its boot sweep is the first sweep

    for run_id in orphans:
        assert app.run(run_id).wait(timeout=30) in (0, 1, 2)
        record = app.run(run_id).info()
        assert record.attempt == 2  # the crash counted as an attempt
        assert record.submitted_at == submitted[run_id], "recovery moved submitted_at"
        requeued = [e for e in store.run_events(run_id) if e.type == "RunRequeued"]
        assert len(requeued) == 1 and requeued[0].metadata["reason"] == "worker gone", requeued
        assert requeued[0].metadata["worker"] == "dead-1"
        # its holder rows were released with the status change, not left for the leak repair
        assert "SlotLeakRepaired" not in event_types(app, run_id)
    assert worker.completed == 2

    # the live worker's run was left alone: still running, still holding its slot
    alive = app.run(alive_run.id).info()
    assert alive.status is RunStatus.RUNNING and alive.worker_id == "alive-1" and alive.attempt == 1
    assert [row[0] for row in _holders(database_url, alive_run.id)] == ["queue:orph"]
    assert "RunRequeued" not in event_types(app, alive_run.id)


def test_a_dead_workers_run_past_its_last_attempt_fails_as_orphaned(app, clock):
    @app.task(name="orph.once", queue="orph1", max_attempts=1)
    def once() -> None: ...

    handle = once.submit()
    app.store.register_worker(WorkerRegistration("dead-2", 1, ["orph1"], False, DEAD_TTL))
    [claimed] = app.store.cycle(CycleRequest("dead-2", ["orph1"], [], [], 1, 300)).claimed
    app.store.cycle(
        CycleRequest("dead-2", ["orph1"], [claimed.fence], [], 0, 300)
    )  # it started, alone: the crash is its own
    clock.advance(2 * DEAD_TTL)
    report = app.store.sweep("sweeper-1", 1.0)
    assert report is not None and report.failed == [handle.id] and report.requeued == []
    record = handle.info()
    assert record.status is RunStatus.FAILED and record.error.startswith("orphaned"), record.error
    assert claimed.attempt == 1
