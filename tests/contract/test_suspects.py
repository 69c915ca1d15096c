"""A crash is charged to the run that caused it: suspects run alone (domain/recovery.py).

A rescue charges an attempt only if it started and ran alone; every rescued
run goes back as a suspect, which a worker takes only when idle, as the only
run of its turn, recording its start before its body runs; a reported
outcome clears it. Driven by store calls with short leases, on both backends.
"""

import threading
import time

import pytest

from tidegate import Context, RunStatus
from tidegate.cli.runs import run_details
from tidegate.domain.admission import Candidate, LocalUsage, admit
from tidegate.domain.model import Outcome, OutcomeKind
from tidegate.domain.recovery import LostAttempt, rescue
from tidegate.domain.scopes import Rules

QUEUE = "suspects"
LEASE = 0.2


def _claim(store, worker, limit=1, lease=LEASE):
    return store.cycle(worker, [QUEUE], [], [], limit, lease).claimed


def _start(store, worker, *runs):
    store.cycle(worker, [QUEUE], [run.fence for run in runs], [], 0, LEASE)


def _rescue(app, *run_ids):
    """Move the clock past the short leases: the next sweep rescues every one of `run_ids`."""
    app.clock.advance(LEASE + 0.05)
    report = app.store.sweep("sweeper", 0.05)
    assert report is not None and set(run_ids) <= {*report.requeued, *report.failed}, report


def _rescue_event(store, run_id):
    return [e for e in store.run_events(run_id) if e.type in ("RunRequeued", "RunFailed", "RunCanceled")][-1]


@pytest.fixture
def task(app):
    @app.task(name="t.suspect", queue=QUEUE, max_attempts=1)
    def suspect_task(n: int) -> int:
        return n

    return suspect_task


# --- the rule, pure ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("started", "suspect", "beside", "attempt", "status", "charged", "max_attempts"),
    [
        (False, False, 0, 1, "queued", False, 4),  # claimed, never started: not charged
        (False, True, 0, 3, "queued", False, 4),  # a suspect lost before its start was recorded
        (True, False, 3, 3, "queued", False, 4),  # started beside 3 others: not charged, even on its last attempt
        (True, False, 0, 1, "queued", True, 3),  # started, alone
        (True, True, 0, 2, "queued", True, 3),  # a suspect, alone by construction
        (True, True, 2, 3, "failed", True, 3),  # a suspect (others counted were rescued earlier): charged, spent
        (True, False, 0, 3, "failed", True, 3),
    ],
)
def test_the_rescue_rule(started, suspect, beside, attempt, status, charged, max_attempts):
    lost = LostAttempt("r", attempt, 3, "w", True, started, suspect, beside)
    verdict = rescue(lost)
    assert (verdict.status, verdict.charged, verdict.max_attempts) == (status, charged, max_attempts)
    assert verdict.suspect is (status == "queued")  # every re-queued rescued run runs alone next
    assert (verdict.error is not None) is (status == "failed")
    assert verdict.max_attempts >= 3 and verdict.attempt == attempt  # the fencing token never goes down
    metadata = verdict.metadata(lost)
    assert metadata["charged"] is charged and metadata["why"]


def test_a_canceled_run_is_never_charged():
    verdict = rescue(LostAttempt("r", 3, 3, "w", False, True, True, 0, cancel_requested=True))
    assert verdict.status == "canceled" and not verdict.charged and verdict.error is None


def _candidate(run_id, at, suspect=False, queue="q"):
    return Candidate(run_id, "t", queue, "", {}, 0, at, suspect=suspect)


@pytest.mark.parametrize(
    ("order", "running", "admitted"),
    [
        (["S", "a", "b"], 0, ["S"]),  # an idle worker: the suspect, alone
        (["S", "a", "b"], 1, []),  # a busy worker drains for the suspect at the head
        (["a", "S", "b"], 0, ["a"]),  # runs ahead go first; the turn stops at the suspect
        (["a", "b", "c"], 1, ["a", "b", "c"]),  # no suspect: nothing changes
    ],
)
def test_admit_gives_a_suspect_only_to_an_idle_worker_as_its_only_run(order, running, admitted):
    candidates = [_candidate(run_id, float(i), suspect=run_id == "S") for i, run_id in enumerate(order)]
    local = LocalUsage(per_queue={"q": running} if running else {})
    decision = admit(candidates, {}, Rules(), local, capacity=4)
    assert [candidate.id for candidate, _ in decision.admitted] == admitted


# --- the rescue, in the store --------------------------------------------------------------------


def test_a_claimed_but_never_started_run_is_not_charged(app, task):
    handle = task.submit(n=1)  # max_attempts=1: charging this rescue would fail it
    [run] = _claim(app.store, "dead-worker")
    _rescue(app, run.id)
    record = handle.info()
    assert record.status is RunStatus.QUEUED, record.error
    assert record.attempt == 1 and record.max_attempts == 2 and record.suspect
    event = _rescue_event(app.store, run.id)
    assert event.type == "RunRequeued"
    assert event.metadata["charged"] is False and event.metadata["suspect"] is True
    assert "before its start was recorded" in event.metadata["why"]


def test_runs_that_shared_a_lost_worker_are_not_charged(app, task):
    handles = task.submit_many([{"n": i} for i in range(3)])
    runs = _claim(app.store, "dead-worker", limit=3)
    _start(app.store, "dead-worker", *runs)
    _rescue(app, *(run.id for run in runs))
    for handle in handles:
        record = handle.info()
        assert record.status is RunStatus.QUEUED and record.suspect and record.max_attempts == 2
        event = _rescue_event(app.store, handle.id)
        assert event.metadata["charged"] is False
        assert "beside 2 other runs" in event.metadata["why"], event.metadata


def test_a_run_rescued_after_its_neighbours_is_not_charged_either(app, task):
    """Leases of one worker may lapse at different sweeps: the runs rescued earlier still count."""
    first, second = task.submit_many([{"n": 1}, {"n": 2}])
    [early] = _claim(app.store, "dead-worker", lease=LEASE)
    [late] = app.store.cycle("dead-worker", [QUEUE], [early.fence], [], 1, 30).claimed  # a long lease
    _start(app.store, "dead-worker", late)
    _rescue(app, early.id)
    assert late.id == second.id and app.run(late.id).status() is RunStatus.RUNNING
    # now its lease lapses too, with nothing of its worker running any more
    app.store.renew_leases("dead-worker", [late.fence], LEASE)
    _rescue(app, late.id)
    record = second.info()
    assert record.status is RunStatus.QUEUED and record.suspect, record.error
    event = _rescue_event(app.store, late.id)
    assert event.metadata["charged"] is False and "beside 1 other run" in event.metadata["why"]
    assert first.info().status is RunStatus.QUEUED


def test_a_suspect_that_crashes_alone_is_charged_and_fails_when_spent(app, task):
    handle = task.submit(n=1)
    [run] = _claim(app.store, "dead-1")
    _rescue(app, run.id)  # not started: not charged, max_attempts 2
    [run] = _claim(app.store, "dead-2")
    assert run.suspect and run.attempt == 2
    _start(app.store, "dead-2", run)
    _rescue(app, run.id)
    record = handle.info()
    assert record.status is RunStatus.FAILED and not record.suspect
    event = _rescue_event(app.store, run.id)
    assert event.type == "RunFailed" and event.metadata["charged"] is True
    assert event.metadata["why"].endswith("alone as a suspect: attempt 2 of 2 charged, none left")


# --- claiming a suspect ---------------------------------------------------------------------------


def _make_suspect(app, task, n=0):
    handle = task.submit(n=n)
    [run] = _claim(app.store, "dead-worker")
    assert run.id == handle.id
    _rescue(app, run.id)
    assert handle.info().suspect
    return handle


def _busy_worker(app, worker):
    """A worker running one run of another queue: not idle."""

    @app.task(name="t.elsewhere", queue="elsewhere")
    def elsewhere() -> None: ...

    elsewhere.submit()
    [held] = app.store.cycle(worker, ["elsewhere"], [], [], 1, 30).claimed
    return held


def test_a_suspect_is_claimed_alone_by_an_idle_worker_and_nothing_beside_it(app, task):
    suspect = _make_suspect(app, task)
    others = task.submit_many([{"n": i} for i in range(1, 5)])
    held = _busy_worker(app, "busy")
    # a busy worker takes nothing while the suspect heads the queue: it drains for it
    assert app.store.cycle("busy", [QUEUE], [], [], 3, 30).claimed == []
    assert all(handle.status() is RunStatus.QUEUED for handle in [suspect, *others])
    # once idle, it takes the suspect, and only the suspect, though it asks for 4
    done = Outcome(held.id, held.attempt, OutcomeKind.COMPLETED, result=None)
    claimed = app.store.cycle("busy", [QUEUE], [held.fence], [done], 4, 30).claimed
    assert [run.id for run in claimed] == [suspect.id] and claimed[0].suspect
    assert all(handle.status() is RunStatus.QUEUED for handle in others)


def test_an_idle_worker_takes_the_suspect_while_a_busy_one_drains_then_resumes(app, task):
    suspect = _make_suspect(app, task)
    others = task.submit_many([{"n": i} for i in range(1, 4)])
    _busy_worker(app, "busy")
    assert app.store.cycle("busy", [QUEUE], [], [], 3, 30).claimed == []
    assert [run.id for run in app.store.cycle("idle", [QUEUE], [], [], 3, 30).claimed] == [suspect.id]
    # the suspect is taken: the runs behind it are not held up any longer
    taken = app.store.cycle("busy", [QUEUE], [], [], 3, 30).claimed
    assert [run.id for run in taken] == [handle.id for handle in others]


def test_runs_ahead_of_a_suspect_go_first_and_stop_the_turn_at_it(app, task):
    suspect = _make_suspect(app, task)
    ahead = app.tasks["t.suspect"].submit(n=5)
    # ahead is younger; give it a higher priority so that it comes first
    from .conftest import execute_sql

    execute_sql(app.database, "UPDATE tidegate_runs SET priority = 5 WHERE id = ?", (ahead.id,))
    behind = task.submit(n=6)
    claimed = app.store.cycle("w", [QUEUE], [], [], 4, 30).claimed
    assert [run.id for run in claimed] == [ahead.id]  # not the suspect beside it, nor what is behind it
    assert suspect.status() is RunStatus.QUEUED and behind.status() is RunStatus.QUEUED


def test_a_suspect_whose_attempt_reports_an_outcome_is_cleared(app, task):
    suspect = _make_suspect(app, task)
    [run] = _claim(app.store, "worker", lease=30)
    assert run.id == suspect.id and run.suspect
    app.store.cycle(
        "worker", [QUEUE], [run.fence], [Outcome(run.id, run.attempt, OutcomeKind.COMPLETED, result=7)], 0, 30
    )
    record = suspect.info()
    assert record.status is RunStatus.COMPLETED and not record.suspect


def test_runs_show_says_a_run_is_a_suspect(app, task):
    suspect = _make_suspect(app, task)
    from rich.console import Console

    console = Console(width=200, record=True)
    console.print(run_details(suspect.info()))
    assert "suspect" in console.export_text()


# --- a real worker -------------------------------------------------------------------------------


def test_a_worker_runs_a_suspect_alone_with_its_start_recorded_first(app, start_worker):
    intervals: list[tuple[str, float, float]] = []
    lock = threading.Lock()
    start_seen: dict[str, bool] = {}

    @app.task(name="t.timed", queue=QUEUE, max_attempts=2)
    def timed(ctx: Context, n: int) -> int:
        began = time.monotonic()
        start_seen[ctx.run_id] = app.store.get_run(ctx.run_id).started_at is not None
        time.sleep(0.15)
        with lock:
            intervals.append((ctx.run_id, began, time.monotonic()))
        return n

    older = timed.submit_many([{"n": i} for i in range(3)])
    suspect = timed.submit(n=99)
    [run] = app.store.cycle("dead-worker", [QUEUE], [], [], 1, LEASE).claimed  # takes the oldest
    assert run.id == older[0].id
    claimed = app.store.cycle("dead-worker", [QUEUE], [], [], 3, LEASE).claimed
    assert suspect.id in {r.id for r in claimed}
    _rescue(app, *(r.id for r in [run, *claimed]))
    assert all(app.run(r.id).info().suspect for r in [run, *claimed])
    younger = timed.submit_many([{"n": i} for i in range(10, 16)])
    start_worker(max_workers=4)
    for handle in [*older, suspect, *younger]:
        handle.wait(timeout=60)
    by_run = {run_id: (began, ended) for run_id, began, ended in intervals}
    suspects = [r.id for r in [run, *claimed]]
    for run_id in suspects:
        assert start_seen[run_id], "a suspect's body ran before its start was recorded"
        began, ended = by_run[run_id]
        overlapping = [o for o, (b, e) in by_run.items() if o != run_id and b < ended and e > began]
        assert not overlapping, f"suspect {run_id} ran beside {overlapping}"
        assert not app.run(run_id).info().suspect  # it completed: cleared
    # the rescued runs kept their place: every suspect ran before every younger run
    assert max(by_run[r][0] for r in suspects) < min(by_run[h.id][0] for h in younger)
