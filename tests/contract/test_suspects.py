"""A crash is charged to the run that caused it; suspects come back in groups (domain/recovery.py).

A rescue charges an attempt only if it started and the crash is surely its
own (it ran alone, or as the only suspect); every rescued run goes back as a
suspect in a group (halves of its crash), and a worker runs the suspects of
one group at a time beside any other work, recording a suspect's start
before its body runs; a reported outcome clears it. Driven by store calls
with short leases, on both backends.
"""

import threading
import time

import pytest

from tidegate import Context, RunStatus
from tidegate.cli.runs import run_details
from tidegate.domain.admission import Candidate, LocalUsage, admit
from tidegate.domain.model import CycleRequest, Outcome, OutcomeKind
from tidegate.domain.recovery import LostAttempt, rescue
from tidegate.domain.scopes import Rules

QUEUE = "suspects"
LEASE = 0.2


def _claim(store, worker, limit=1, lease=LEASE, queues=(QUEUE,)):
    return store.cycle(CycleRequest(worker, list(queues), [], [], limit, lease)).claimed


def _start(store, worker, *runs):
    store.cycle(CycleRequest(worker, [QUEUE], [run.fence for run in runs], [], 0, LEASE))


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
        (True, True, 0, 2, "queued", True, 3),  # a suspect, alone
        (True, True, 2, 3, "queued", False, 4),  # a suspect beside runs of its worker lost earlier: not judged
        (True, False, 0, 3, "failed", True, 3),
    ],
)
def test_the_rescue_rule(started, suspect, beside, attempt, status, charged, max_attempts):
    lost = LostAttempt("r", attempt, 3, "w", True, started, suspect, beside)
    [verdict] = rescue([lost])
    assert (verdict.status, verdict.charged, verdict.max_attempts) == (status, charged, max_attempts)
    assert verdict.suspect is (status == "queued")  # every re-queued rescued run is a suspect
    assert (verdict.group is not None) is (status == "queued")
    assert (verdict.error is not None) is (status == "failed")
    assert verdict.max_attempts >= 3 and verdict.attempt == attempt  # the fencing token never goes down
    metadata = verdict.metadata(lost)
    assert metadata["charged"] is charged and metadata["why"] and metadata["group"] == verdict.group


def test_a_canceled_run_is_never_charged():
    [verdict] = rescue([LostAttempt("r", 3, 3, "w", False, True, True, 0, cancel_requested=True)])
    assert verdict.status == "canceled" and not verdict.charged and verdict.error is None


def _lost(run_id, suspect, started=True, crash=4):
    return LostAttempt(run_id, 2, 3, "w", False, started, suspect, crash - 1)


def test_the_only_suspect_of_a_crash_is_charged_and_the_runs_beside_it_are_not():
    crash = [_lost("s", True, crash=3), _lost("a", False, crash=3), _lost("b", False, crash=3)]
    verdicts = {v.run_id: v for v in rescue(crash)}
    assert verdicts["s"].charged and "as the only suspect beside" in verdicts["s"].why
    assert not verdicts["a"].charged and not verdicts["b"].charged
    assert verdicts["a"].max_attempts == 4  # not charged: the attempt is handed back


def test_a_crash_with_two_suspects_charges_neither_and_splits_them():
    verdicts = rescue([_lost("s1", True, crash=2), _lost("s2", True, crash=2)])
    assert not any(v.charged for v in verdicts)
    assert verdicts[0].group != verdicts[1].group  # split: each is a group of one now


def test_a_suspect_that_never_started_does_not_count():
    """A suspect's start is recorded before its body runs: one lost unstarted did not crash anything."""
    verdicts = {v.run_id: v for v in rescue([_lost("s", True, crash=2), _lost("u", True, started=False, crash=2)])}
    assert verdicts["s"].charged and not verdicts["u"].charged


def test_a_crash_goes_back_in_halves_its_suspects_apart_from_the_others():
    crash = [_lost(f"s{i}", True, crash=10) for i in range(4)] + [_lost(f"n{i}", False, crash=10) for i in range(6)]
    groups: dict[str, list[str]] = {}
    for verdict in rescue(crash):
        groups.setdefault(verdict.group, []).append(verdict.run_id)
    assert sorted(map(sorted, groups.values())) == [
        ["n0", "n1", "n2"],
        ["n3", "n4", "n5"],
        ["s0", "s1"],
        ["s2", "s3"],
    ]


def _candidate(run_id, at, suspect=False, queue="q", group=None):
    return Candidate(run_id, "t", queue, "", {}, 0, at, suspect=suspect, group=group)


@pytest.mark.parametrize(
    ("order", "held", "admitted"),
    [
        (["A1", "a", "A2", "b"], None, ["A1", "a", "A2", "b"]),  # a group beside other work
        (["A1", "B1", "a", "A2"], None, ["A1", "a", "A2"]),  # one group per worker: B waits
        (["B1", "A1", "a"], "A", ["A1", "a"]),  # the group it already runs, and no other
        (["B1", "B2", "a", "b"], "A", ["a", "b"]),  # another group's suspects never stop it
        (["a", "b", "c"], "A", ["a", "b", "c"]),  # no suspect: nothing changes
    ],
)
def test_admit_gives_a_worker_one_group_of_suspects_beside_any_other_work(order, held, admitted):
    candidates = [
        _candidate(run_id, float(i), suspect=run_id[0].isupper(), group=run_id[0] if run_id[0].isupper() else None)
        for i, run_id in enumerate(order)
    ]
    local = LocalUsage(per_queue={"q": 1}, suspect_group=held) if held else LocalUsage()
    decision = admit(candidates, {}, Rules(), local, capacity=8)
    assert [candidate.id for candidate, _ in decision.admitted] == admitted
    assert not decision.blocked  # a suspect passed over is not blocked: another worker takes it


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
    [late] = app.store.cycle(CycleRequest("dead-worker", [QUEUE], [early.fence], [], 1, 30)).claimed  # a long lease
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


def test_a_crash_goes_back_in_two_groups_and_its_only_suspect_is_charged_next_time(app, task):
    handles = task.submit_many([{"n": i} for i in range(4)])
    runs = _claim(app.store, "dead-1", limit=4)
    _start(app.store, "dead-1", *runs)
    _rescue(app, *(run.id for run in runs))
    groups = {handle.id: _rescue_event(app.store, handle.id).metadata["group"] for handle in handles}
    assert sorted(list(groups.values()).count(group) for group in set(groups.values())) == [2, 2]
    # the next worker takes one group, and a fresh run beside it; not the other group
    fresh = task.submit(n=9)
    taken = _claim(app.store, "dead-2", limit=8)
    first_group = groups[taken[0].id]
    assert {run.id for run in taken} == {h.id for h in handles if groups[h.id] == first_group} | {fresh.id}
    # it crashes with one suspect started: that one is charged, the others are not
    suspect = taken[0]
    _start(app.store, "dead-2", suspect, *(run for run in taken if run.id == fresh.id))
    _rescue(app, *(run.id for run in taken))
    event = _rescue_event(app.store, suspect.id)
    assert event.metadata["charged"] is True and "as the only suspect beside 2 other runs" in event.metadata["why"]
    assert app.run(suspect.id).status() is RunStatus.FAILED  # max_attempts=1+1 (its first rescue was not charged)
    for run in taken[1:]:
        assert _rescue_event(app.store, run.id).metadata["charged"] is False


# --- claiming a suspect ---------------------------------------------------------------------------


def _make_suspect(app, task, n=0, worker="dead-worker"):
    handle = task.submit(n=n)
    [run] = _claim(app.store, worker)
    assert run.id == handle.id
    _rescue(app, run.id)
    assert handle.info().suspect
    return handle


def _busy_worker(app, worker):
    """A worker running one run of another queue: not idle."""

    @app.task(name="t.elsewhere", queue="elsewhere")
    def elsewhere() -> None: ...

    elsewhere.submit()
    [held] = app.store.cycle(CycleRequest(worker, ["elsewhere"], [], [], 1, 30)).claimed
    return held


def test_a_busy_worker_takes_a_suspect_beside_its_work_and_the_runs_behind_it(app, task):
    suspect = _make_suspect(app, task)
    others = task.submit_many([{"n": i} for i in range(1, 4)])
    _busy_worker(app, "busy")
    claimed = app.store.cycle(CycleRequest("busy", [QUEUE], [], [], 4, 30)).claimed
    assert [run.id for run in claimed] == [suspect.id, *(handle.id for handle in others)]  # in place, no drain
    assert claimed[0].suspect and not any(run.suspect for run in claimed[1:])


def test_a_worker_running_a_suspect_serves_other_queues_and_steps_past_another_group(app, task):
    first, second = task.submit_many([{"n": 1}, {"n": 2}])
    lost = [*_claim(app.store, "dead-1"), *_claim(app.store, "dead-2")]  # two crashes: two groups
    _rescue(app, *(run.id for run in lost))
    [held] = _claim(app.store, "w", lease=30)
    assert held.id == first.id and held.suspect
    behind = task.submit(n=3)
    # one slot asked at a time: the read steps past the other group's suspect at the head
    assert [run.id for run in _claim(app.store, "w", lease=30)] == [behind.id]
    assert second.status() is RunStatus.QUEUED
    elsewhere = _busy_worker(app, "w")  # and it still claims from another queue
    assert elsewhere.queue == "elsewhere"
    # a worker free of suspects takes the other group
    assert [run.id for run in _claim(app.store, "free", limit=4, lease=30)] == [second.id]


def test_a_suspect_whose_attempt_reports_an_outcome_is_cleared(app, task):
    suspect = _make_suspect(app, task)
    [run] = _claim(app.store, "worker", lease=30)
    assert run.id == suspect.id and run.suspect
    app.store.cycle(
        CycleRequest(
            "worker", [QUEUE], [run.fence], [Outcome(run.id, run.attempt, OutcomeKind.COMPLETED, result=7)], 0, 30
        )
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


def test_a_worker_records_a_suspects_start_first_and_serves_other_work_beside_it(app, start_worker):
    """The suspect blocks until the run of another queue, claimed while it runs, has completed."""
    release = threading.Event()
    start_seen: dict[str, bool] = {}

    @app.task(name="t.blocking", queue=QUEUE, max_attempts=2)
    def blocking(ctx: Context) -> str:
        start_seen.setdefault(ctx.run_id, app.store.get_run(ctx.run_id).started_at is not None)
        assert release.wait(30), "the run of the other queue never ran beside the suspect"
        return "done"

    @app.task(name="t.other", queue="other")
    def other() -> str:
        release.set()
        return "other"

    suspect = blocking.submit()
    [run] = app.store.cycle(CycleRequest("dead-worker", [QUEUE], [], [], 1, LEASE)).claimed
    _rescue(app, run.id)
    assert suspect.info().suspect
    start_worker(queues=[QUEUE, "other"], max_workers=4)
    wait_until = time.monotonic() + 30
    while suspect.status() is not RunStatus.RUNNING and time.monotonic() < wait_until:
        time.sleep(0.01)
    assert suspect.status() is RunStatus.RUNNING
    later = other.submit()
    assert later.wait(timeout=20) == "other"  # claimed while the suspect runs on the only worker
    assert suspect.wait(timeout=30) == "done"
    assert suspect.info().attempt == 2  # the attempt that ran beside it: rescued once, never retried
    assert start_seen[suspect.id], "a suspect's body ran before its start was recorded"
    assert not suspect.info().suspect  # it completed: cleared
