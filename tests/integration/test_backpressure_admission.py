"""Admission: a ceiling on active runs (queued + running), checked at submit, all-or-none.

Past the ceiling `submit` raises `AdmissionRejected` with a retry hint and
stores nothing (no run, no event); a batch that would cross it is refused
whole; racing submitters (threads or processes) never push the stored count
past it; `tidegate submit` exits 75 (EX_TEMPFAIL) with the hint on one line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from contextlib import ExitStack

import pytest

from tests.apps.backpressure import (
    CEILING,
    QUEUE,
    gate_open,
    make_app,
    max_overlap,
    read_intervals,
    running_workers,
)
from tidegate import AdmissionRejected, App, RunQueueConfig, RunStatus, Task
from tidegate.domain.backpressure import Pace, retry_after

from .conftest import REPO_ROOT, execute_sql, wait_until


def _stored(app) -> int:
    return sum(app.store.status_counts().values())


def _events(database_url) -> int:
    """Events a submit writes (RunQueued), plus any about a run that is not stored (workers write others)."""
    return execute_sql(
        database_url,
        "SELECT count(*) FROM tidegate_events AS e WHERE e.type = 'RunQueued' OR (e.run_id IS NOT NULL "
        "AND NOT EXISTS (SELECT 1 FROM tidegate_runs AS r WHERE r.id = e.run_id))",
    )[0][0]


def _env(**extra: str) -> dict[str, str]:
    """The environment for a child process: this worktree's code first."""
    path = [os.environ.get("PYTHONPATH", ""), str(REPO_ROOT / "src"), str(REPO_ROOT)]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, path)), **extra}


def _reject(gated, **args) -> AdmissionRejected:
    with pytest.raises(AdmissionRejected) as caught:
        gated.submit(**args)
    return caught.value


@pytest.mark.parametrize("workers", ["threads", "processes"])
def test_the_ceiling_rejects_the_sixteenth_and_the_fifteen_drain_three_at_a_time(
    database_url, workers, worker_processes, tmp_path, monkeypatch
):
    log, gate = tmp_path / "intervals.log", tmp_path / "gate"
    monkeypatch.setenv("TIDEGATE_TEST_LOG", str(log))
    monkeypatch.setenv("TIDEGATE_TEST_GATE", str(gate))
    with make_app(database_url) as app, ExitStack() as stack:
        gated = app.tasks["bp.gated"]
        assert _stored(app) == 0  # migrates and registers before any worker process opens the file
        if workers == "threads":
            stack.enter_context(running_workers(app, *[{"max_workers": 1}] * 3))
        else:
            env = {"TIDEGATE_TEST_LOG": str(log), "TIDEGATE_TEST_GATE": str(gate)}
            for _ in range(3):
                worker_processes.spawn("tests.apps.backpressure:app", database_url, max_workers=1, env=env)

        # 12 singly, then a batch of 4 (would make 16) refused whole, then a batch of 3 (makes 15)
        handles = [gated.submit(n=i) for i in range(12)]
        events_before = _events(database_url)
        with pytest.raises(AdmissionRejected) as batch:
            gated.submit_many([{"n": 100 + i} for i in range(4)])
        assert batch.value.limit == CEILING and batch.value.active == 12
        assert _stored(app) == 12 and _events(database_url) == events_before
        handles += gated.submit_many([{"n": 12 + i} for i in range(3)])
        assert _stored(app) == CEILING

        # three workers of capacity one hold three runs; the other twelve wait
        wait_until(lambda: app.store.status_counts()[RunStatus.RUNNING] == 3, 60, message="each worker to hold one run")
        wait_until(lambda: app.store.run_pace(60, queue=QUEUE).running == 3, 60, message="their starts recorded")
        events_before = _events(database_url)
        rejected = _reject(gated, n=15)
        assert 1 <= rejected.retry_after < retry_after(CEILING, CEILING, 1, Pace())  # from the runs in flight
        assert rejected.active == CEILING and rejected.limit == CEILING
        assert f"queue {QUEUE}" in str(rejected) and f"retry after {rejected.retry_after}s" in str(rejected)
        assert _stored(app) == CEILING, "a rejected submit stored a run"
        assert _events(database_url) == events_before, "a rejected submit wrote an event"

        gate.touch()
        results = [handle.wait(timeout=60) for handle in handles]
        assert results == list(range(CEILING))
        counts = app.store.status_counts()
        assert counts[RunStatus.COMPLETED] == CEILING and counts[RunStatus.FAILED] == 0
        assert _stored(app) == CEILING

        intervals = read_intervals(log)
        assert len(intervals) == CEILING and all(len(times) == 2 for times in intervals.values()), intervals
        assert {run_id for run_id, _ in intervals} == {handle.id for handle in handles}
        assert all(attempt == 1 for _, attempt in intervals)
        assert max_overlap([(start, end) for start, end in intervals.values()]) == 3

        # The hint follows how long the runs took: 15 ended within the window, so a place
        # is expected to free far sooner than the no-evidence answer.
        gate.unlink()
        handles = gated.submit_many([{"n": i} for i in range(CEILING)])
        faster = _reject(gated, n=99)
        assert 1 <= faster.retry_after < retry_after(CEILING, CEILING, 1, Pace()), faster.retry_after
        assert _stored(app) == 2 * CEILING
        gate.touch()
        for handle in handles:
            handle.wait(timeout=60)


def test_the_global_ceiling_counts_every_queue_and_running_runs(database_url, tmp_path, monkeypatch):
    """RunQueueConfig(max_active=N) caps the active runs of all queues together, running ones included."""
    gate = tmp_path / "gate"
    monkeypatch.setenv("TIDEGATE_TEST_GATE", str(gate))
    with App(database_url, run_queue=RunQueueConfig(max_active=4)) as app, ExitStack() as stack:

        @app.task(name="g.one", queue="one")
        def one() -> None:
            while not gate_open():
                time.sleep(0.01)

        @app.task(name="g.two", queue="two")
        def two() -> None:
            return None

        stack.enter_context(running_workers(app, {"max_workers": 2, "queues": ["one"]}))
        first = [one.submit(), one.submit()]
        wait_until(lambda: app.store.status_counts()[RunStatus.RUNNING] == 2, 30, message="two running")
        two.submit()
        two.submit()
        with pytest.raises(AdmissionRejected) as caught:
            two.submit()
        assert caught.value.scope == "all queues" and caught.value.active == 4 and caught.value.limit == 4
        with pytest.raises(AdmissionRejected):
            one.submit()
        assert _stored(app) == 4
        gate.touch()
        for handle in first:
            handle.wait(timeout=30)
        two.submit()  # two places freed by the completions
        assert _stored(app) == 5


def test_concurrent_submitting_threads_never_pass_the_ceiling(database_url):
    """Threads race for the last places of a global ceiling (singles and batches, two queues)."""
    ceiling, threads, attempts = 20, 8, 10
    with App(database_url, run_queue=RunQueueConfig(max_active=ceiling)) as app:

        @app.task(name="race.a", queue="a")
        def race_a(n: int) -> int:
            return n

        @app.task(name="race.b", queue="b")
        def race_b(n: int) -> int:
            return n

        race_a.submit_many([])  # migrated, limits registered before the race
        barrier = threading.Barrier(threads)
        lock = threading.Lock()
        accepted: list[str] = []
        rejected = [0]
        errors: list[BaseException] = []

        def submitter(index: int) -> None:
            task = race_a if index % 2 else race_b
            try:
                barrier.wait(30)
                for attempt in range(attempts):
                    batch = 2 if (index + attempt) % 3 == 0 else 1
                    try:
                        handles = task.submit_many([{"n": attempt}] * batch)
                    except AdmissionRejected:
                        with lock:
                            rejected[0] += 1
                    else:
                        with lock:
                            accepted.extend(handle.id for handle in handles)
            except BaseException as error:
                errors.append(error)

        pool = [threading.Thread(target=submitter, args=(i,)) for i in range(threads)]
        for thread in pool:
            thread.start()
        for thread in pool:
            thread.join(120)
        assert not errors, errors
        stored = _stored(app)
        assert stored <= ceiling, f"{stored} runs stored under a ceiling of {ceiling}"
        assert stored == len(accepted) == len(set(accepted))
        assert stored >= ceiling - 1  # singles keep coming after the batches: the places do get used
        assert rejected[0] > 0


def _admitted_ids(task: Task, args: list[dict[str, int]]) -> list[str]:
    """The ids of a batch the ceilings admitted, or none when they refused it (saying when to retry)."""
    try:
        handles = task.submit_many(args)
    except AdmissionRejected as rejected:
        assert rejected.retry_after >= 1
        return []
    return [handle.id for handle in handles]


def test_concurrent_submitters_never_pass_overlapping_ceilings(database_url):
    """A global and two queue ceilings at once, each submitter with its own store (its own connections).

    A batch of one queue takes two ceiling locks (all queues, then its queue):
    submitters of the two queues share one and each holds the other, so any
    lock taken out of key order would deadlock, and any count taken before its
    lock was granted would let a queue or the total past its ceiling.
    """
    total, per_queue, submitters, attempts = 14, 9, 8, 12
    apps: list[App] = []

    def make() -> App:
        application = App(database_url, run_queue=RunQueueConfig(max_active=total))
        application.queue("a", max_active=per_queue)
        application.queue("b", max_active=per_queue)
        for queue in ("a", "b"):
            application.task(name=f"overlap.{queue}", queue=queue)(lambda n: n)
        apps.append(application)
        return application

    try:
        first = make()
        first.tasks["overlap.a"].submit_many([])  # migrated, limits registered before the race
        others = [make() for _ in range(submitters - 1)]
        for application in others:
            application.tasks["overlap.a"].submit_many([])
        barrier = threading.Barrier(submitters)
        lock = threading.Lock()
        accepted: dict[str, list[str]] = {"a": [], "b": []}
        errors: list[BaseException] = []

        def submitter(index: int, application: App) -> None:
            try:
                barrier.wait(30)
                for attempt in range(attempts):
                    queue = "ab"[(index + attempt) % 2]
                    batch = 1 + (index + attempt) % 3
                    ids = _admitted_ids(application.tasks[f"overlap.{queue}"], [{"n": attempt}] * batch)
                    with lock:
                        accepted[queue].extend(ids)
            except BaseException as error:
                errors.append(error)

        pool = [threading.Thread(target=submitter, args=(i, a)) for i, a in enumerate([first, *others])]
        for thread in pool:
            thread.start()
        for thread in pool:
            thread.join(120)
        assert not errors, errors
        counts = {queue: sum(first.store.status_counts(queue).values()) for queue in ("a", "b")}
        assert counts["a"] <= per_queue and counts["b"] <= per_queue, counts
        assert counts["a"] + counts["b"] <= total, counts
        assert counts == {queue: len(ids) for queue, ids in accepted.items()}
        assert counts["a"] + counts["b"] >= total - 2  # batches of up to 3 keep coming: the places get used
    finally:
        for application in apps:
            application.close()


def test_concurrent_submitting_processes_never_pass_the_ceiling(database_url, tmp_path):
    start = tmp_path / "start"
    with make_app(database_url) as app:
        assert _stored(app) == 0
        app.tasks["bp.gated"].submit_many([])  # migrated, limits registered
        command = [
            sys.executable,
            "-m",
            "tests.apps.backpressure_submit",
            str(start),
            "--threads",
            "4",
            "--attempts",
            "8",
        ]
        env = _env(TIDEGATE_DATABASE=database_url)
        processes = [
            subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            for _ in range(2)
        ]
        try:
            wait_until(
                lambda: len(list(tmp_path.glob("start.ready.*"))) == 2 or any(p.poll() is not None for p in processes),
                60,
                message="both submitters to be ready",
            )
            start.touch()
            outputs = [process.communicate(timeout=120) for process in processes]
        finally:
            for process in processes:
                if process.poll() is None:
                    process.kill()
                    process.wait()
        reports = []
        for process, (out, err) in zip(processes, outputs, strict=True):
            assert process.returncode == 0, err.decode()
            reports.append(json.loads(out.decode().strip().splitlines()[-1]))
        accepted = [run_id for report in reports for run_id in report["accepted"]]
        stored = _stored(app)
        assert stored <= CEILING, f"{stored} runs stored under a ceiling of {CEILING}"
        assert stored == len(accepted) == CEILING  # 64 tries for 15 places: all taken, none twice
        assert sum(report["rejected"] for report in reports) == 2 * 4 * 8 - CEILING
        assert {run.id for run in app.store.page_runs(limit=100)} == set(accepted)


def test_cli_submit_to_a_full_queue_exits_75_with_the_hint(database_url):
    with make_app(database_url) as app:
        app.tasks["bp.gated"].submit_many([{"n": i} for i in range(CEILING)])
        events_before = _events(database_url)
        completed = subprocess.run(
            [sys.executable, "-m", "tidegate", "submit", "bp.gated", "--arg", "n=1", "--database", database_url],
            cwd=REPO_ROOT,
            env=_env(),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert completed.returncode == 75, (completed.returncode, completed.stdout, completed.stderr)
        assert completed.stdout.strip() == "", "a run id was printed for a rejected submit"
        lines = [line for line in completed.stderr.splitlines() if line.strip()]
        assert len(lines) == 1, completed.stderr
        assert "admission ceiling" in lines[0] and "retry after 61s" in lines[0], lines[0]
        assert "Traceback" not in completed.stderr
        assert _stored(app) == CEILING and _events(database_url) == events_before

        # below the ceiling the same command succeeds (exit 0, the run id)
        app.run(app.store.page_runs(limit=1)[0].id).cancel()
        completed = subprocess.run(
            [sys.executable, "-m", "tidegate", "submit", "bp.gated", "--arg", "n=1", "--database", database_url],
            cwd=REPO_ROOT,
            env=_env(),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert completed.returncode == 0, completed.stderr
        assert app.run(completed.stdout.strip()).status() is RunStatus.QUEUED
