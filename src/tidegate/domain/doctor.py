"""`tidegate doctor`'s rules: facts about a deployment in, one pass/warn/fail finding per check out.

Pure: the engine (`engine/operators/doctor.py`) reads the facts through the store, these
functions judge them, and the CLI and the API only render the findings. The
thresholds are here, once, so both faces say the same thing.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from tidegate.domain.durations import format_duration
from tidegate.domain.leases import stuck
from tidegate.domain.model import QueueCounts, RunRecord, WorkerRecord, host_and_pid
from tidegate.domain.schedules import ScheduleRecord
from tidegate.domain.steps import PoolStatus

SKEW_WARN = 1.0  # seconds between this host's clock and the database's: run_at and leases start to drift
SKEW_FAIL = 30.0  # past this, a deadline or a schedule read on this host is plainly wrong
SCHEDULE_GRACE = timedelta(minutes=1)  # a live worker fires due ticks about once a second
RETENTION_GRACE = timedelta(hours=1)  # the sweeper prunes a few batches per sweep: a backlog may take a while
CONNECTIONS_WARN = 0.8  # share of the server's usable connections in use, or needed by the live workers
SHOWN = 5  # names a finding lists before "and N more"


class Level(str, enum.Enum):
    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"


_ORDER = {Level.PASS: 0, Level.WARN: 1, Level.FAIL: 2}


@dataclass(frozen=True)
class Finding:
    check: str  # a short stable name: store, schema, clock, workers, queues, pools, stuck, schedules, ...
    level: Level
    message: str

    def document(self) -> dict[str, Any]:
        """The finding as `doctor --json` and `GET /api/v1/doctor` show it."""
        return {"check": self.check, "level": self.level.value, "message": self.message}


@dataclass(frozen=True)
class DatabaseFacts:
    """What only the database can say (`Store.doctor_facts`)."""

    dialect: str  # "sqlite" or "postgresql"
    now: datetime  # the store's clock: what leases, schedules and the retention are compared with
    server_now: datetime | None  # the database's own clock, without a test clock's offset; None: it has none
    prunable: int  # finished runs past the retention still stored (those the sweep would delete)
    oldest_prunable_at: datetime | None  # when the oldest of them finished
    max_connections: int | None = None  # PostgreSQL: the server's max_connections
    reserved_connections: int | None = None  # ... of which only superusers may use these
    connections: int | None = None  # ... open now, on the whole server
    per_process: int | None = None  # connections one worker process opens at most (the adapter's bound)
    per_process_parts: str = ""  # ... and of which kinds, as the message names them


@dataclass(frozen=True)
class Facts:
    """Everything the checks look at, read in one go by `engine.operators.doctor`."""

    host_now: datetime  # this host's clock (the injected one)
    schema_version: int
    database: DatabaseFacts
    workers: Sequence[WorkerRecord]
    queues: Mapping[str, QueueCounts]
    pools: Sequence[PoolStatus]
    running: Sequence[RunRecord]
    schedules: Sequence[ScheduleRecord]
    retention: float  # seconds (TIDEGATE_RETENTION)
    paused: frozenset[str] = field(default_factory=frozenset)  # queues paused by an operator


@dataclass(frozen=True)
class Diagnosis:
    findings: tuple[Finding, ...]

    @property
    def level(self) -> Level:
        """The worst finding's level."""
        return max((finding.level for finding in self.findings), key=_ORDER.__getitem__, default=Level.PASS)

    @property
    def exit_code(self) -> int:
        """0 when every check passed, 1 with a warning, 2 with a failure."""
        return _ORDER[self.level]

    def document(self) -> dict[str, Any]:
        """`doctor --json` and `GET /api/v1/doctor`: one shape for both."""
        return {"level": self.level.value, "findings": [finding.document() for finding in self.findings]}


def unreachable(reason: str) -> Finding:
    return Finding("store", Level.FAIL, f"the store cannot be reached: {reason}")


def examine(facts: Facts) -> list[Finding]:
    """Every check, in the order an operator reads them."""
    return [
        Finding("store", Level.PASS, f"the store answers ({facts.database.dialect})"),
        schema(facts.schema_version, None),
        clock(facts.host_now, facts.database.server_now),
        workers(facts.workers),
        unserved_queues(facts.queues, facts.workers, facts.paused),
        unconfigured_pools(facts.pools),
        stuck_runs(facts.running, facts.database.now),
        overdue_schedules(facts.schedules, facts.database.now),
        retention(facts.database, facts.retention),
        connections(facts.database, facts.workers),
    ]


def schema(version: int, problem: str | None) -> Finding:
    """`problem`: why the store refuses this schema (behind or ahead of the code), None when current."""
    if problem is not None:
        return Finding("schema", Level.FAIL, problem)
    return Finding("schema", Level.PASS, f"schema version {version} is current")


def clock(host_now: datetime, server_now: datetime | None) -> Finding:
    if server_now is None:
        return Finding("clock", Level.PASS, "SQLite has no clock of its own: each process stamps with its host's")
    skew = (host_now - server_now).total_seconds()
    said = f"this host's clock is {format_duration(abs(skew))} {'ahead of' if skew > 0 else 'behind'} the database's"
    if abs(skew) > SKEW_FAIL:
        return Finding(
            "clock", Level.FAIL, f"{said}: fix its time sync (leases and schedules use the database's clock)"
        )
    if abs(skew) > SKEW_WARN:
        return Finding("clock", Level.WARN, f"{said}: a run_at given as a time from this host drifts by that much")
    return Finding(
        "clock", Level.PASS, f"this host's clock agrees with the database's (within {format_duration(SKEW_WARN)})"
    )


def workers(records: Sequence[WorkerRecord]) -> Finding:
    live = [worker for worker in records if worker.live]
    if not live:
        return Finding("workers", Level.WARN, "no live worker: nothing runs until one starts ('tidegate worker')")
    served = ", ".join(f"{worker.id} ({', '.join(worker.queues)})" for worker in live[:SHOWN])
    return Finding("workers", Level.PASS, f"{len(live)} live worker(s): {served}{_more(live)}")


def unserved_queues(
    queues: Mapping[str, QueueCounts], records: Sequence[WorkerRecord], paused: frozenset[str]
) -> Finding:
    served = {queue for worker in records if worker.live for queue in worker.queues}
    waiting = sorted(name for name, counts in queues.items() if counts.queued and name not in served)
    if not waiting:
        return Finding("queues", Level.PASS, "every queue with queued runs has a live worker")
    listed = ", ".join(
        f"{name} ({queues[name].queued} queued{', paused' if name in paused else ''})" for name in waiting[:SHOWN]
    )
    return Finding("queues", Level.WARN, f"queued runs that no live worker serves: {listed}{_more(waiting)}")


def unconfigured_pools(pools: Sequence[PoolStatus]) -> Finding:
    unset = [pool.name for pool in pools if not pool.configured]
    if not unset:
        return Finding("pools", Level.PASS, "every pool steps ask for is configured")
    names = ", ".join(unset[:SHOWN])
    return Finding(
        "pools",
        Level.WARN,
        f"pools used by steps but never configured (unlimited): {names}{_more(unset)};"
        " set a limit with app.set_pool_limit or 'tidegate pools set'",
    )


def stuck_runs(running: Sequence[RunRecord], now: datetime) -> Finding:
    found = [run for run in running if stuck(True, run.lease_expires_at, now)]
    if not found:
        return Finding("stuck", Level.PASS, "no running run is past its lease")
    ids = ", ".join(run.id for run in found[:SHOWN])
    return Finding(
        "stuck",
        Level.WARN,
        f"{len(found)} run(s) past their lease, holding their slots until a sweep: {ids}{_more(found)}"
        " ('tidegate sweep' recovers them now)",
    )


def overdue_schedules(records: Sequence[ScheduleRecord], now: datetime) -> Finding:
    late = [record for record in records if not record.paused and record.next_fire_at < now - SCHEDULE_GRACE]
    if not late:
        return Finding("schedules", Level.PASS, "no schedule is late")
    listed = ", ".join(
        f"{record.name} (due {format_duration((now - record.next_fire_at).total_seconds())} ago)"
        for record in late[:SHOWN]
    )
    return Finding("schedules", Level.WARN, f"schedules not fired when due: {listed}{_more(late)} (no live worker?)")


def retention(database: DatabaseFacts, kept: float) -> Finding:
    now = database.now
    period = format_duration(kept)
    oldest = database.oldest_prunable_at
    if not database.prunable or oldest is None or oldest > now - timedelta(seconds=kept) - RETENTION_GRACE:
        return Finding("retention", Level.PASS, f"no finished run is kept past the retention ({period})")
    late = format_duration((now - oldest).total_seconds() - kept)
    return Finding(
        "retention",
        Level.WARN,
        f"{database.prunable} finished run(s) kept past the retention ({period}), the oldest by {late}:"
        " the sweep has not pruned them (no worker has swept, or its TIDEGATE_RETENTION is longer)",
    )


def connections(database: DatabaseFacts, records: Sequence[WorkerRecord]) -> Finding:
    if database.max_connections is None or database.per_process is None:
        return Finding("connections", Level.PASS, f"{database.dialect}: no connection limit applies")
    usable = database.max_connections - (database.reserved_connections or 0)
    processes = {host_and_pid(worker.id) for worker in records if worker.live}  # a process's workers share its pool
    needed = len(processes) * database.per_process
    said = (
        f"max_connections {database.max_connections} ({usable} usable), {database.connections} open;"
        f" {len(processes)} worker process(es) may open {needed} ({database.per_process} each"
        f"{': ' + database.per_process_parts if database.per_process_parts else ''})"
    )
    if needed > usable:
        return Finding("connections", Level.FAIL, f"{said}: more than the server allows; raise max_connections")
    if needed > CONNECTIONS_WARN * usable or (database.connections or 0) > CONNECTIONS_WARN * usable:
        return Finding("connections", Level.WARN, f"{said}: close to the server's limit")
    return Finding("connections", Level.PASS, said)


def _more(items: Sequence[Any]) -> str:
    return f" and {len(items) - SHOWN} more" if len(items) > SHOWN else ""
