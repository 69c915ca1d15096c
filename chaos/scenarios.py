"""The fault scenarios: each drives a `Harness`, then returns its figures and the checker's verdict.

Timing is random but seeded (`random.Random(seed)`), so a run that found
something can be replayed with the same `--seed`. Every scenario is bounded:
it stops injecting after its budget and gives the runs a fixed time to drain.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from chaos import history
from chaos.apps import LIMITS, PARTITIONS
from chaos.cluster import Cluster
from chaos.harness import Harness
from tidegate.domain.model import RunStatus
from tidegate.storage.postgres.listener import APPLICATION_NAME as LISTENER_NAME

DRAIN_TIMEOUT = 90.0
# The LISTEN scenario's worker polls every LISTEN_POLL and checks its wake-up
# connection every LISTEN_CHECK: a pickup slower than the bound came from the poll.
LISTEN_POLL = "30s"
LISTEN_CHECK = "1s"
LISTEN_PICKUP_BOUND = 5.0


@dataclass
class Result:
    name: str
    figures: dict[str, Any] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Mode:
    storm_kills: int
    storm_workers: int
    kill_gap: tuple[float, float]  # seconds between two kills, uniform
    outage: float  # seconds the database stays stopped
    crashes: int  # SIGKILLs of the whole PostgreSQL server (the crash scenario)


SHORT = Mode(storm_kills=12, storm_workers=3, kill_gap=(0.3, 1.0), outage=3.0, crashes=2)
LONG = {
    "postgres": Mode(storm_kills=1000, storm_workers=4, kill_gap=(0.05, 0.45), outage=10.0, crashes=20),
    "sqlite": Mode(storm_kills=300, storm_workers=3, kill_gap=(0.1, 0.6), outage=10.0, crashes=0),
}
CRASH_GAP = (1.0, 4.0)  # seconds of load between two server crashes, uniform
CRASH_DOWN = (0.0, 2.0)  # seconds the crashed server stays down before its restart, uniform


def submit_mix(harness: Harness, rng: random.Random, count: int) -> list[str]:
    """Runs under every limit: plain and gold runs over the partitions, pooled workflows."""
    tasks = harness.app.tasks
    ids = []
    for _ in range(count):
        roll = rng.random()
        if roll < 0.1:
            handle = tasks["chaos.flow"].submit(items=3, ms=rng.randint(100, 300))
        else:
            name = "chaos.gold" if roll < 0.3 else "chaos.sleep"
            handle = tasks[name].submit(p=rng.randrange(PARTITIONS), ms=rng.randint(30, 300))
        ids.append(handle.id)
    return ids


def finish(
    harness: Harness, name: str, submitted: list[str], started: float, innocents: Sequence[str] = (), **figures: Any
) -> Result:
    """Let the runs drain, stop every worker, then check the whole history."""
    drained = harness.wait_finished(DRAIN_TIMEOUT)
    harness.close_workers()
    recorded = harness.history(submitted, LIMITS, innocents)
    violations = history.check(recorded)
    if not drained:
        violations.insert(0, f"drain: runs still unfinished after {DRAIN_TIMEOUT:.0f}s")
    spans = history.intervals(recorded.entries)
    peak = history.peaks(spans)
    return Result(
        name,
        {
            "runs": len(submitted),
            **figures,
            "peak": f"{peak.get('global', 0)}/{LIMITS['global']}",
            "pool": f"{peak.get('pool:chaos', 0)}/{LIMITS['pool:chaos']}",
            "secs": round(time.monotonic() - started),
        },
        violations,
    )


def storm(harness: Harness, rng: random.Random, mode: Mode, progress: Callable[[int, int], None]) -> Result:
    """SIGKILL a random worker every few hundred ms, restart it, keep a backlog under every limit."""
    started = time.monotonic()
    workers = [harness.spawn() for _ in range(mode.storm_workers)]
    submitted = submit_mix(harness, rng, 40)
    for kill in range(mode.storm_kills):
        time.sleep(rng.uniform(*mode.kill_gap))
        victim = workers.pop(rng.randrange(len(workers)))
        harness.kill(victim)
        workers.append(harness.spawn())
        if kill % 10 == 0 and harness.unfinished() < 30:
            submitted += submit_mix(harness, rng, 30)
        progress(kill + 1, mode.storm_kills)
    kills, hits, pool_hits = history.kills_and_hits(harness.entries())
    return finish(harness, "storm", submitted, started, kills=kills, hits=hits, in_pool=pool_hits)


def poison(harness: Harness, rng: random.Random) -> Result:
    """1 poison run + 5 innocents on one worker (capacity 4) restarted whenever it dies."""
    started = time.monotonic()
    tasks = harness.app.tasks
    poisoned = tasks["chaos.poison"].submit()
    innocents = [tasks["chaos.quick"].submit(ms=1000).id for _ in range(5)]
    worker = harness.spawn(max_workers=4)
    restarts = 0
    deadline = time.monotonic() + DRAIN_TIMEOUT
    while harness.unfinished() and time.monotonic() < deadline:
        if worker.poll() is not None:
            harness.workers.remove(worker)
            harness.note("kill", worker.pid, storm=False)  # it died by its own hand: its executions end here
            worker = harness.spawn(max_workers=4)
            restarts += 1
        time.sleep(0.1)
    status = harness.status(poisoned.id)
    return finish(
        harness,
        "poison",
        [poisoned.id, *innocents],
        started,
        innocents,
        restarts=restarts,
        poison=status.value if status else "?",
    )


def zombie(harness: Harness, rng: random.Random) -> Result:
    """SIGSTOP a worker mid-run past its lease; another worker redoes the run; SIGCONT the zombie,
    whose late completion must be fenced out (one accepted outcome per attempt)."""
    started = time.monotonic()
    first = harness.spawn()
    run = harness.app.tasks["chaos.sleep"].submit(p=0, ms=3000)
    # Freeze it once its start is recorded (before that, the rescue would be of a run that never
    # started: the poison scenario's business), just before its body ends: thawed, it finishes at
    # once and reports the outcome before its lease renewal can tell it the run was taken over.
    _wait(lambda: any(e.type == "RunStarted" for e in harness.app.store.run_events(run.id)), 30)
    body_start = next(e["t"] for e in harness.entries() if e.get("run") == run.id)
    time.sleep(max(0.0, body_start + 2.9 - time.monotonic()))
    harness.freeze(first)
    harness.spawn()
    # Thaw it while the other worker runs attempt 2: its late outcome meets a running row.
    _wait(lambda: any(e.get("run") == run.id and e["attempt"] == 2 for e in harness.entries()), 60)
    harness.thaw(first)
    late = _wait(
        lambda: any(e.get("run") == run.id and e["kind"] == "end" and e["pid"] == first.pid for e in harness.entries()),
        15,
    )
    _wait(lambda: harness.status(run.id) not in (None, RunStatus.RUNNING), 60)
    record = harness.app.store.get_run(run.id)
    return finish(
        harness,
        "zombie",
        [run.id],
        started,
        attempt=record.attempt if record else "?",
        late_end="yes" if late else "no",
    )


def skew(harness: Harness, rng: random.Random) -> Result:
    """Two workers whose wall clocks are 4 s ahead and behind the database's, under load."""
    started = time.monotonic()
    harness.spawn(skew=4.0)
    harness.spawn(skew=-4.0)
    submitted = submit_mix(harness, rng, 60)
    return finish(harness, "skew", submitted, started, skew="+-4s")


def restart(harness: Harness, rng: random.Random, cluster: Cluster, outage: float) -> Result:
    """`pg_ctl restart`, then stop / `outage` s / start, mid-load: work resumes by itself."""
    started = time.monotonic()
    for _ in range(2):
        harness.spawn()
    submitted = submit_mix(harness, rng, 60)
    time.sleep(1.0)
    harness.note("db-restart", 0)
    cluster.restart()
    after_restart = _resume_delay(harness, cluster.wait_accepting())
    submitted += submit_mix(harness, rng, 30)
    time.sleep(1.0)
    harness.note("db-stop", 0)
    cluster.stop()
    time.sleep(outage)
    cluster.start()
    harness.note("db-started", 0)
    after_stop = _resume_delay(harness, cluster.wait_accepting())
    submitted += submit_mix(harness, rng, 30)
    return finish(
        harness, "restart", submitted, started, resume_restart=f"{after_restart:.1f}s", resume_stop=f"{after_stop:.1f}s"
    )


def crash(harness: Harness, rng: random.Random, cluster: Cluster, crashes: int) -> Result:
    """SIGKILL the whole PostgreSQL server mid-load (`Cluster.crash`), `crashes` times; each start
    replays the WAL. Submits go on from a thread throughout: every id a submit returned was
    acknowledged and must be in the store at the end (the checker's `lost` rule), and no limit may
    be exceeded across the crashes and recoveries (its `concurrency` rule)."""
    started = time.monotonic()
    replays_before = cluster.recoveries()  # the cluster serves every scenario of the backend
    for _ in range(3):
        harness.spawn()
    submitter = Submitter(harness, random.Random(rng.random()))
    submitter.start()
    resumes = []
    killed = 0  # processes: each crash takes the postmaster and every backend and helper it forked
    try:
        for _ in range(crashes):
            time.sleep(rng.uniform(*CRASH_GAP))
            harness.note("db-crash", 0)
            killed += len(cluster.crash())
            time.sleep(rng.uniform(*CRASH_DOWN))
            cluster.start()
            resumes.append(_resume_delay(harness, cluster.wait_accepting()))
        time.sleep(rng.uniform(*CRASH_GAP))
    finally:
        submitter.stop()
    replays = cluster.recoveries() - replays_before
    result = finish(
        harness,
        "crash",
        submitter.acknowledged,
        started,
        crashes=crashes,
        killed=killed,
        replays=replays,
        refused=submitter.refused,
        resume_max=f"{max(resumes, default=0.0):.1f}s",
    )
    if replays != crashes:
        result.violations.append(f"setup: {crashes} crashes but {replays} WAL replays: a fault was not a crash")
    return result


class Submitter:
    """Submits a mix of runs one at a time from its own thread until stopped, whatever the server
    does: an id returned is an acknowledged submit, an exception a refused one (the server was
    down). A submit whose commit reached the server but whose answer was lost is neither; its run
    is in the store, and the checker holds it to the same rules as the others."""

    def __init__(self, harness: Harness, rng: random.Random) -> None:
        self.harness = harness
        self.rng = rng
        self.acknowledged: list[str] = []
        self.refused = 0
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="chaos-submitter", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(timeout=120)

    def _loop(self) -> None:
        while not self._stopping.wait(self.rng.uniform(0.05, 0.25)):
            try:
                self.acknowledged += submit_mix(self.harness, self.rng, 1)
            except Exception:  # the server is down on purpose: counted, not raised
                self.refused += 1


def listen(harness: Harness, rng: random.Random, cluster: Cluster) -> Result:
    """Kill, then freeze (SIGSTOP), the worker's LISTEN backend; a submit is still picked up."""
    started = time.monotonic()
    harness.spawn()
    submitted: list[str] = []
    latencies: list[float] = []
    problems = []
    for fault in ("none", "kill", "freeze"):
        time.sleep(1.5)
        pids = cluster.backends(LISTENER_NAME)
        if fault != "none" and not pids:
            problems.append(f"setup: no LISTEN backend found to {fault}: this fault was not injected")
        for pid in pids if fault != "none" else []:
            harness.note(f"listen-{fault}", pid)  # a backend's pid: no execution is cut by it
        if fault == "kill":
            for pid in pids:
                cluster.terminate(pid)
        frozen = pids if fault == "freeze" else []
        for pid in frozen:
            _signal(pid, "STOP")
        try:
            time.sleep(0.3)
            begun = time.monotonic()
            run = harness.app.tasks["chaos.sleep"].submit(p=1, ms=10)
            submitted.append(run.id)
            _wait(_picked_up(harness, run.id), 60)
            latencies.append(time.monotonic() - begun)  # baseline, killed, frozen
        finally:
            for pid in frozen:
                _signal(pid, "CONT")
    result = finish(harness, "listen", submitted, started, pickup_ok_kill_stop="/".join(f"{s:.2f}s" for s in latencies))
    result.violations += problems
    result.violations += [
        f"wake-up: a submit waited {seconds:.1f}s with the LISTEN backend {fault}: only the backstop poll found it"
        for fault, seconds in zip(("alive", "killed", "frozen"), latencies, strict=False)
        if seconds > LISTEN_PICKUP_BOUND
    ]
    return result


def _signal(pid: int, name: str) -> None:
    os.kill(pid, getattr(signal, f"SIG{name}"))


def _resume_delay(harness: Harness, accepting_at: float, timeout: float = 30.0) -> float:
    """Seconds from the server accepting connections to the next execution starting."""
    _wait(lambda: any(e["kind"] == "start" and e["t"] > accepting_at for e in harness.entries()), timeout)
    later = [e["t"] for e in harness.entries() if e["kind"] == "start" and e["t"] > accepting_at]
    return min(later, default=accepting_at + timeout) - accepting_at


def _picked_up(harness: Harness, run_id: str) -> Callable[[], bool]:
    """Whether the task log shows `run_id` started (a predicate for `_wait`)."""
    return lambda: any(entry.get("run") == run_id for entry in harness.entries())


def _wait(predicate: Callable[[], Any], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):  # the database may be down mid-fault: keep polling
            if predicate():
                return True
        time.sleep(0.05)
    return False
