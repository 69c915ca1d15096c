"""SQLite adapter of the storage port (the embedded default).

Every write is one `BEGIN IMMEDIATE` transaction: SQLite has a single
writer, which is what serializes claims (a deferred BEGIN that upgrades to a
write fails with SQLITE_BUSY_SNAPSHOT under concurrency). WAL lets readers
proceed meanwhile. Each thread gets its own connection.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tidegate.domain.admission import LocalUsage, admit
from tidegate.domain.backpressure import RATE_WINDOW_SECONDS, WorkerSlot, claimable_queues, lowest_free_rank, retry_after
from tidegate.domain.errors import AdmissionRejected, RunNotFound, StoreUnavailable
from tidegate.domain.jsonvalue import dumps
from tidegate.domain.limits import (
    QueueConfig,
    RunQueueConfig,
    queue_from_dict,
    queue_to_dict,
    run_queue_from_dict,
    run_queue_to_dict,
)
from tidegate.domain.model import (
    ClaimedRun,
    CycleResult,
    EventRecord,
    HolderRecord,
    LimitChange,
    LimitOverride,
    NewRun,
    Outcome,
    RunRecord,
    RunStatus,
    SweepReport,
    TaskDefinition,
)
from tidegate.domain.scopes import Rules, effective_limit
from tidegate.storage import claiming, records, rescue
from tidegate.storage.migrations import Migration, check_current, load_migrations, pending
from tidegate.storage.port import Fence
from tidegate.storage.sqlfile import load_queries
from tidegate.storage.sqlite import files
from tidegate.storage.sqlite.steps import SQLiteStepVerbs
from tidegate.storage.sqlite.wakeups import DatagramListener, DatagramNotifier
from tidegate.storage.urls import masked

BUSY_TIMEOUT_MS = 30_000
SWEEPER_LOCK = "sweeper"
OVERFLOW_SAMPLE = 100  # queued runs looked at per queue when deciding whether runs wait for a worker


def _to_time(value: float | None) -> datetime | None:
    return None if value is None else datetime.fromtimestamp(value, UTC)


def _to_json(value: str | None) -> Any:
    return None if value is None else json.loads(value)


class SQLiteStore(SQLiteStepVerbs):
    def __init__(self, url: str, path: Path) -> None:
        self.url = url
        self._path = path
        self._where = masked(str(path))  # for messages: even a path may carry a password= by mistake
        try:
            files.private_folder(path.parent)
            files.private_file(path)
        except OSError as error:
            raise StoreUnavailable(masked(f"cannot create {path}: {error}")) from error
        self._queries = load_queries("tidegate.storage.sqlite")
        self._migrations: list[Migration] = load_migrations("tidegate.storage.sqlite.migrations")
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._connections_lock = threading.Lock()
        self._rules_cache: tuple[str, Rules] | None = None
        # Rank of each worker that joined the fill order through this store: only such a
        # worker above rank 0 reads the registry when it claims, so the order costs nothing when off.
        self._fill_ranks: dict[str, int] = {}
        self._enable_wal()
        self._wake_folder = path.with_name(path.name + ".wake")
        files.private_folder(self._wake_folder)
        self._notifier = DatagramNotifier(self._wake_folder)

    # --- connections and transactions ------------------------------------------

    def _connection(self) -> sqlite3.Connection:
        connection = getattr(self._local, "connection", None)
        if connection is None:
            try:
                connection = sqlite3.connect(
                    self._path, isolation_level=None, check_same_thread=False, timeout=BUSY_TIMEOUT_MS / 1000
                )
            except sqlite3.Error as error:
                raise StoreUnavailable(f"cannot open {self._where}: {error}") from error
            connection.row_factory = sqlite3.Row
            try:
                connection.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
                connection.execute("PRAGMA synchronous = NORMAL")
            except sqlite3.Error as error:
                connection.close()
                raise StoreUnavailable(f"cannot use {self._where}: {error}") from error
            self._local.connection = connection
            with self._connections_lock:
                self._connections.append(connection)
        return connection

    def _enable_wal(self) -> None:
        """Put the file in WAL mode (persistent), waiting out other openers.

        Switching the journal mode does not honour busy_timeout: while another
        connection writes to a fresh file, SQLite refuses at once (or quietly
        keeps the old mode), so several processes opening a new database
        together must retry until the mode really is WAL.
        """
        deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
        pause = 0.005
        while True:
            try:
                with contextlib.closing(sqlite3.connect(self._path, isolation_level=None, timeout=1)) as connection:
                    mode = connection.execute("PRAGMA journal_mode = WAL").fetchone()[0]
                if mode == "wal":
                    return
                problem = f"journal mode stayed {mode!r}"
            except sqlite3.OperationalError as error:
                problem = str(error)
            except sqlite3.Error as error:
                raise StoreUnavailable(f"cannot open {self._where}: {error}") from error
            if time.monotonic() >= deadline:
                raise StoreUnavailable(f"cannot put {self._where} in WAL mode: {problem}")
            time.sleep(pause)
            pause = min(pause * 2, 0.1)

    @contextmanager
    def _write(self) -> Iterator[tuple[sqlite3.Connection, float]]:
        """A write transaction and its time, read once the write lock is held.

        Reading the clock before BEGIN IMMEDIATE would stamp a transaction that
        waited for the lock earlier than one that committed before it.
        """
        connection = self._connection()
        connection.execute("BEGIN IMMEDIATE")
        try:
            yield connection, time.time()
        except BaseException:
            connection.execute("ROLLBACK")
            raise
        connection.execute("COMMIT")

    def _q(self, name: str) -> str:
        return self._queries[name]

    # --- schema ---------------------------------------------------------------

    def migrate(self) -> list[int]:
        applied = []
        with self._write() as (connection, now):
            connection.execute(
                "CREATE TABLE IF NOT EXISTS tidegate_schema_version "
                "(version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at REAL NOT NULL)"
            )
            current = connection.execute(self._q("schema_version")).fetchone()[0]
            for migration in pending(self._migrations, current):
                for statement in _statements(migration.sql):
                    connection.execute(statement)
                connection.execute(
                    self._q("record_migration"),
                    {"version": migration.version, "name": migration.name, "now": time.time()},
                )
                applied.append(migration.version)
        return applied

    def schema_version(self) -> int:
        connection = self._connection()
        exists = connection.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'tidegate_schema_version'"
        ).fetchone()
        if not exists:
            return 0
        return connection.execute(self._q("schema_version")).fetchone()[0]

    def check_schema(self) -> None:
        check_current(self._migrations, self.schema_version())

    # --- tasks ----------------------------------------------------------------

    def register_tasks(self, tasks: Sequence[TaskDefinition]) -> None:
        rows: list[dict[str, Any]] = [
            {
                "name": task.name,
                "queue": task.queue,
                "priority": task.priority,
                "tags": dumps(task.tags),
                "max_attempts": task.max_attempts,
                "retry_backoff": task.retry_backoff,
                "timeout": task.timeout,
                "dispatch_deadline": task.dispatch_deadline,
            }
            for task in tasks
        ]
        with self._write() as (connection, now):
            for row in rows:
                row["now"] = now
            connection.executemany(self._q("register_task"), rows)

    def get_task(self, name: str) -> TaskDefinition | None:
        row = self._connection().execute(self._q("get_task"), {"name": name}).fetchone()
        return None if row is None else records.task_definition(row, _to_json)

    # --- runs -------------------------------------------------------------------

    def enqueue(self, runs: Sequence[NewRun]) -> None:
        rows: list[dict[str, Any]] = [
            {
                "id": run.id,
                "task": run.task,
                "queue": run.queue,
                "partition_key": run.partition,
                "priority": run.priority,
                "args": dumps(run.args),
                "tags": dumps(run.tags),
                "concurrency_key": run.concurrency_key,
                "max_attempts": run.max_attempts,
                "retry_backoff": run.retry_backoff,
                "timeout": run.timeout,
                "delay": run.delay,
                "deadline": run.deadline,
            }
            for run in runs
        ]
        events: list[dict[str, Any]] = [
            {"run_id": run.id, "type": "RunQueued", "metadata": dumps({"queue": run.queue})} for run in runs
        ]
        with self._write() as (connection, now):
            for row in rows + events:
                row["now"] = now
            self._check_admission(connection, runs, now)
            connection.executemany(self._q("enqueue"), rows)
            connection.executemany(self._q("insert_event"), events)
        self._notifier.notify()

    def _check_admission(self, connection: sqlite3.Connection, runs: Sequence[NewRun], now: float) -> None:
        """Refuse the batch if it would push active runs past a ceiling (counted in this transaction)."""
        rules = self._load_rules(connection)
        incoming: dict[str | None, int] = {None: len(runs)}
        for run in runs:
            incoming[run.queue] = incoming.get(run.queue, 0) + 1
        for queue, count in incoming.items():
            limit = rules.run_queue.max_active if queue is None else rules.max_active(queue)
            if limit is None:
                continue
            active = connection.execute(self._q("active_runs"), {"queue": queue}).fetchone()[0]
            if active + count > limit:
                recent = connection.execute(
                    self._q("recent_completions"), {"queue": queue, "since": now - RATE_WINDOW_SECONDS}
                ).fetchone()[0]
                raise AdmissionRejected(
                    "all queues" if queue is None else f"queue {queue}",
                    active,
                    limit,
                    retry_after(active, limit, count, recent),
                )

    def cycle(
        self,
        worker_id: str,
        queues: Sequence[str],
        starts: Sequence[Fence],
        outcomes: Sequence[Outcome],
        claim_limit: int,
        lease_seconds: float,
    ) -> CycleResult:
        events: list[dict[str, Any]] = []
        fenced_out: list[Fence] = []
        claimed: list[ClaimedRun] = []
        more = False
        with self._write() as (connection, now):
            if starts:
                for run_id, attempt in connection.execute(
                    self._q("record_starts"), {"fences": json.dumps(starts), "worker": worker_id, "now": now}
                ).fetchall():
                    events.append(_event(run_id, "RunStarted", {"attempt": attempt, "worker": worker_id}, now))
            if outcomes:
                fenced_out = self._record_outcomes(connection, worker_id, outcomes, events, now)
            cancel_requested = [
                (row[0], row[1]) for row in connection.execute(self._q("cancel_requests"), {"worker": worker_id})
            ]
            next_due_in = None
            if claim_limit > 0 and self._fill_ranks.get(worker_id, 0) > 0:
                queues = self._fill_order_queues(connection, worker_id, queues, now)
                claim_limit = claim_limit if queues else 0
            if claim_limit > 0:
                claimed, more = self._claim(connection, worker_id, queues, claim_limit, lease_seconds, events, now)
                if len(claimed) < claim_limit:
                    next_due_in = self._next_due_in(connection, queues, now)
            if events:
                connection.executemany(self._q("insert_event"), events)
        if outcomes or (worker_id in self._fill_ranks and claimed and len(claimed) == claim_limit):
            # Finished runs free capacity and may be waited on; a full claim by a worker in the
            # fill order may leave work for the next one, which only looks when told.
            self._notifier.notify()
        return CycleResult(claimed, fenced_out, cancel_requested, next_due_in, more)

    def _record_outcomes(
        self,
        connection: sqlite3.Connection,
        worker_id: str,
        outcomes: Sequence[Outcome],
        events: list[dict[str, Any]],
        now: float,
    ) -> list[Fence]:
        payload = []
        by_fence = {}
        for outcome in outcomes:
            status = records.outcome_status(outcome.kind.value, outcome.retry_delay)
            payload.append(
                {
                    "id": outcome.run_id,
                    "attempt": outcome.attempt,
                    "status": status,
                    "result": None if outcome.result is None else dumps(outcome.result),
                    "error": outcome.error,
                    "delay": outcome.retry_delay,
                }
            )
            by_fence[(outcome.run_id, outcome.attempt)] = (status, outcome)
        applied = {
            (row[0], row[1]): row[2]
            for row in connection.execute(
                self._q("record_outcomes"), {"outcomes": json.dumps(payload), "worker": worker_id, "now": now}
            )
        }
        if applied:
            connection.execute(self._q("release_holders"), {"ids": json.dumps([fence[0] for fence in applied])})
        for fence, (status, outcome) in by_fence.items():
            if fence in applied:
                final = applied[fence]  # "canceled" when a cancel was requested meanwhile
                metadata: dict[str, Any] = {"attempt": outcome.attempt}
                if outcome.error is not None:
                    metadata["error"] = outcome.error
                if final == "queued":
                    metadata["retry_in"] = round(outcome.retry_delay or 0.0, 3)
                events.append(_event(outcome.run_id, records.EVENT_FOR_STATUS[final], metadata, now))
        return [fence for fence in by_fence if fence not in applied]

    def _claim(
        self,
        connection: sqlite3.Connection,
        worker_id: str,
        queues: Sequence[str],
        limit: int,
        lease_seconds: float,
        events: list[dict[str, Any]],
        now: float,
    ) -> tuple[list[ClaimedRun], bool]:
        """Read candidates and usage, let the pure policy decide, write its decision.

        Returns the claimed runs and whether to claim again at once (the read
        was full and not everything in it could be taken this time).

        BEGIN IMMEDIATE already serializes every claimer on SQLite, so the
        usage read here cannot change before the holders are written.
        """
        rules = self._load_rules(connection)
        usage = {scope: used for scope, used in connection.execute(self._q("scope_usage"))}
        local = LocalUsage()
        if any(rules.local_limit(queue) is not None or rules.max_workers(queue) is not None for queue in queues):
            # Only per-worker caps read this worker's own counts; skip the query on the hot path otherwise.
            local = self._local_usage(connection, worker_id)
        reader = claiming.CandidateReader(
            window=lambda queue, size, excluded: connection.execute(
                self._q("claim_window"), {"queue": queue, "now": now, "limit": size, "excluded": json.dumps(excluded)}
            ).fetchall(),
            partitions=lambda queue, size: [
                row[0] for row in connection.execute(self._q("claim_partitions"), {"queue": queue, "limit": size})
            ],
            partition_head=lambda queue, partition, size, excluded: connection.execute(
                self._q("claim_partition_head"),
                {"queue": queue, "partition": partition, "now": now, "limit": size, "excluded": json.dumps(excluded)},
            ).fetchall(),
        )
        found = claiming.candidate_rows(queues, limit, rules, usage, reader, local)
        rows = found.rows
        if not rows:
            return [], False
        if any(row["suspect"] for row in rows):  # a suspect is taken only by an idle worker: count what it runs
            local = self._local_usage(connection, worker_id)
        lane_load = {
            (queue, partition): count
            for queue in claiming.fair_lanes(queues, rules)
            for partition, count in connection.execute(self._q("lane_load"), {"queue": queue})
        }
        candidates = [claiming.to_candidate(row, rules, json.loads(row["tags"]), row["scheduled_at"]) for row in rows]
        decision = admit(candidates, usage, rules, local, limit, lane_load)
        changed = claiming.changed_block_reasons(decision, {row["id"]: row["block_reason"] for row in rows})
        if changed:
            connection.execute(self._q("set_block_reasons"), {"reasons": json.dumps(list(changed.items()))})
            for run_id, reason in changed.items():
                events.append(_event(run_id, "RunBlocked", {"blocked_by": json.loads(reason)}, now))
        if not decision.admitted:
            return [], False
        admitted_ids = [candidate.id for candidate, _ in decision.admitted]
        claimed_rows = connection.execute(
            self._q("claim_runs"),
            {"ids": json.dumps(admitted_ids), "worker": worker_id, "now": now, "lease": lease_seconds},
        ).fetchall()
        order = {run_id: index for index, run_id in enumerate(admitted_ids)}
        claimed = sorted((_claimed_run(row) for row in claimed_rows), key=lambda run: order[run.id])
        attempts = {run.id: run.attempt for run in claimed}
        holders = [
            (need.key, candidate.id, attempts[candidate.id])
            for candidate, needs in decision.admitted
            for need in needs
            if candidate.id in attempts
        ]
        if holders:
            connection.execute(
                self._q("insert_holders"),
                {"holders": json.dumps(holders), "worker": worker_id, "now": now, "lease": lease_seconds},
            )
        for run in claimed:
            events.append(_event(run.id, "RunDequeued", {"attempt": run.attempt, "worker": worker_id}, now))
        return claimed, found.exhausted and len(claimed) < limit

    def _local_usage(self, connection: sqlite3.Connection, worker_id: str) -> LocalUsage:
        """What this worker runs, per queue and per (queue, partition)."""
        local = LocalUsage()
        for queue, partition, count in connection.execute(self._q("local_usage"), {"worker": worker_id}):
            local.per_queue[queue] = local.per_queue.get(queue, 0) + count
            local.per_partition[(queue, partition)] = count
        return local

    def _fill_order_queues(self, connection: sqlite3.Connection, worker_id: str, queues: Sequence[str], now: float) -> list[str]:
        """The queues this worker may claim from now: all of them, unless it is in the fill order."""
        slots = {
            row["id"]: (
                bool(row["fill_order"]),
                WorkerSlot(row["id"], row["rank"], row["capacity"], row["running"], frozenset(json.loads(row["queues"]))),
            )
            for row in connection.execute(self._q("worker_fill_state"), {"now": now})
        }
        mine = slots.get(worker_id)
        if mine is None or not mine[0]:
            return list(queues)
        allowed = claimable_queues(mine[1], [slot for fill, slot in slots.values() if fill])
        return [queue for queue in queues if queue in allowed]

    def _load_rules(self, connection: sqlite3.Connection) -> Rules:
        """The declared limits plus live overrides, re-read only when their version moved."""
        version = connection.execute(self._q("rules_version")).fetchone()[0]
        if self._rules_cache is not None and self._rules_cache[0] == version:
            return self._rules_cache[1]
        row = connection.execute(self._q("load_run_queue")).fetchone()
        rules = Rules(
            run_queue=run_queue_from_dict(json.loads(row[0])) if row else RunQueueConfig(),
            queues={
                config.name: config
                for config in (queue_from_dict(json.loads(r[0])) for r in connection.execute(self._q("load_queues")))
            },
            overrides={r[0]: r[1] for r in connection.execute(self._q("load_overrides"))},
        )
        self._rules_cache = (version, rules)
        return rules

    def _next_due_in(self, connection: sqlite3.Connection, queues: Sequence[str], now: float) -> float | None:
        dues = [
            connection.execute(self._q("next_due"), {"queue": queue, "now": now}).fetchone()[0] for queue in queues
        ]
        known = [due for due in dues if due is not None]
        return min(known) if known else None

    def renew_leases(self, worker_id: str, held: Sequence[Fence], lease_seconds: float) -> list[Fence]:
        if not held:
            return []
        with self._write() as (connection, now):
            renewed = {
                (row[0], row[1])
                for row in connection.execute(
                    self._q("renew_leases"),
                    {"fences": json.dumps(held), "worker": worker_id, "now": now, "lease": lease_seconds},
                )
            }
            connection.execute(
                self._q("renew_holders"),
                {"ids": json.dumps([fence[0] for fence in renewed]), "worker": worker_id, "now": now, "lease": lease_seconds},
            )
        return [tuple(fence) for fence in held if tuple(fence) not in renewed]  # type: ignore[misc]

    def hand_back(self, worker_id: str, held: Sequence[Fence]) -> list[str]:
        if not held:
            return []
        with self._write() as (connection, now):
            rows = connection.execute(
                self._q("hand_back"), {"fences": json.dumps(held), "worker": worker_id, "now": now}
            ).fetchall()
            connection.execute(self._q("release_holders"), {"ids": json.dumps([row[0] for row in rows])})
            events = [
                _event(
                    run_id,
                    "RunRequeued" if status == "queued" else "RunCanceled",
                    {
                        "attempt": attempt,
                        "reason": "worker shutting down",
                        "worker": worker_id,
                        "charged": False,
                        "suspect": bool(suspect),
                    },
                    now,
                )
                for run_id, attempt, status, suspect in rows
            ]
            connection.executemany(self._q("insert_event"), events)
        self._notifier.notify()
        return [row[0] for row in rows]

    def sweep(self, sweeper_id: str, interval: float) -> SweepReport | None:
        with self._write() as (connection, now):
            turn = connection.execute(
                self._q("take_lock"), {"name": SWEEPER_LOCK, "holder": sweeper_id, "now": now, "ttl": 3 * interval}
            ).fetchone()
            if turn is None:
                return None
            verdicts = rescue.payload(rescue.decide(connection.execute(self._q("sweep_lost"), {"now": now}).fetchall()))
            recovered: dict[str, str] = {}
            if verdicts:
                recovered = dict(
                    connection.execute(
                        self._q("sweep_recover"), {"verdicts": json.dumps(verdicts), "now": now}
                    ).fetchall()
                )
                connection.execute(self._q("release_holders"), {"ids": json.dumps(list(recovered))})
            connection.execute(self._q("forget_dead_workers"), {"now": now})
            events = self._repair_leaks(connection, now)
            expired_slots, step_events = self._sweep_step_holders(connection, now)
            report = SweepReport(leaks_repaired=len(events), step_slots_expired=expired_slots)
            events += step_events
            events += self._fail_missed_deadlines(connection, report, now)
            rescue.add_to_report(report, recovered)
            events += [
                _event(verdict["id"], verdict["event"], verdict["metadata"], now)
                for verdict in verdicts
                if verdict["id"] in recovered
            ]
            connection.executemany(self._q("insert_event"), events)
        if report:
            self._notifier.notify()
        return report

    def _fail_missed_deadlines(
        self, connection: sqlite3.Connection, report: SweepReport, now: float
    ) -> list[dict[str, Any]]:
        events = []
        for row in connection.execute(self._q("missed_deadlines"), {"now": now}).fetchall():
            failed = connection.execute(self._q("fail_missed_deadline"), {"id": row["id"], "now": now}).fetchone()
            if failed is not None:
                report.failed.append(row["id"])
                events.append(_event(row["id"], "RunFailed", {"attempt": failed["attempt"], "error": failed["error"]}, now))
        return events

    def _repair_leaks(self, connection: sqlite3.Connection, now: float) -> list[dict[str, Any]]:
        """Delete holders whose run no longer runs that attempt; one SlotLeakRepaired event each."""
        events = []
        for row in connection.execute(self._q("leaked_holders")).fetchall():
            connection.execute(self._q("delete_holder"), {"scope": row["scope"], "holder": row["holder"]})
            metadata = {"scope": row["scope"], "slots": row["slots"], "attempt": row["attempt"]}
            events.append(_event(row["run_id"], "SlotLeakRepaired", metadata, now))
        return events

    def cancel_run(self, run_id: str) -> RunStatus:
        with self._write() as (connection, now):
            if connection.execute(self._q("cancel_queued"), {"id": run_id, "now": now}).fetchone():
                connection.execute(
                    self._q("insert_event"),
                    _event(run_id, "RunCanceled", {"reason": "canceled while queued"}, now),
                )
            elif connection.execute(self._q("request_cancel"), {"id": run_id}).fetchone():
                pass  # the worker running it is told, and ends it
            row = connection.execute(self._q("run_status"), {"id": run_id}).fetchone()
        if row is None:
            raise RunNotFound(f"no run with id {run_id!r}")
        self._notifier.notify()
        return RunStatus(row[0])

    def pending_count(self, queues: Sequence[str]) -> int:
        connection = self._connection()
        return sum(connection.execute(self._q("pending_count"), {"queue": queue}).fetchone()[0] for queue in queues)

    # --- reading ----------------------------------------------------------------

    def get_run(self, run_id: str) -> RunRecord | None:
        row = self._connection().execute(self._q("get_run"), {"id": run_id}).fetchone()
        return None if row is None else records.run_record(row, _to_time, _to_json)

    def list_runs(
        self, status: RunStatus | None = None, queue: str | None = None, limit: int = 100
    ) -> list[RunRecord]:
        rows = self._connection().execute(
            self._q("list_runs"),
            {"status": status.value if status else None, "queue": queue, "limit": limit},
        )
        return [records.run_record(row, _to_time, _to_json) for row in rows]

    def run_events(self, run_id: str) -> list[EventRecord]:
        rows = self._connection().execute(self._q("run_events"), {"run_id": run_id})
        return [records.event_record(row, _to_time, _to_json) for row in rows]

    def status_counts(self, queue: str | None = None) -> dict[RunStatus, int]:
        counts = dict.fromkeys(RunStatus, 0)
        for status, count in self._connection().execute(self._q("status_counts"), {"queue": queue}):
            counts[RunStatus(status)] = count
        return counts

    # --- workers ------------------------------------------------------------------

    def register_worker(
        self, worker_id: str, capacity: int, queues: Sequence[str], fill_order: bool, ttl: float
    ) -> int:
        with self._write() as (connection, now):
            live = {row["id"]: row["rank"] for row in connection.execute(self._q("live_worker_ranks"), {"now": now})}
            rank = live.get(worker_id)
            if rank is None:
                rank = lowest_free_rank(list(live.values()))
            connection.execute(
                self._q("register_worker"),
                {
                    "id": worker_id,
                    "rank": rank,
                    "capacity": capacity,
                    "queues": json.dumps(sorted(queues)),
                    "fill_order": int(fill_order),
                    "now": now,
                    "ttl": ttl,
                },
            )
        if fill_order:
            self._fill_ranks[worker_id] = rank
        else:
            self._fill_ranks.pop(worker_id, None)
        return rank

    def heartbeat_worker(self, worker_id: str, ttl: float) -> bool:
        with self._write() as (connection, now):
            row = connection.execute(self._q("heartbeat_worker"), {"id": worker_id, "now": now, "ttl": ttl})
            return row.fetchone() is not None

    def deregister_worker(self, worker_id: str) -> None:
        with self._write() as (connection, _):
            connection.execute(self._q("deregister_worker"), {"id": worker_id})
            connection.execute(self._q("release_locks"), {"id": worker_id})
        self._fill_ranks.pop(worker_id, None)
        self._notifier.notify()  # higher-ranked workers may now claim

    def check_overflow(self, worker_id: str, queues: Sequence[str], interval: float) -> int | None:
        """Raise the overflow signal (once per interval, across workers) when eligible runs wait for a worker.

        Eligible means the claim policy would admit it were there room: runs
        held back by a limit do not count. Only when every live worker serving
        these queues is full; returns the backlog when this call raised it.
        """
        with self._write() as (connection, now):
            workers = [row for row in connection.execute(self._q("worker_fill_state"), {"now": now})]
            serving = [row for row in workers if set(json.loads(row["queues"])) & set(queues)]
            if not serving or any(row["running"] < row["capacity"] for row in serving):
                return None
            rules = self._load_rules(connection)
            usage = {scope: used for scope, used in connection.execute(self._q("scope_usage"))}
            rows = [
                row
                for queue in queues
                for row in connection.execute(
                    self._q("claim_window"), {"queue": queue, "now": now, "limit": OVERFLOW_SAMPLE, "excluded": "[]"}
                )
            ]
            candidates = [claiming.to_candidate(row, rules, json.loads(row["tags"]), row["scheduled_at"]) for row in rows]
            eligible = len(admit(candidates, usage, rules, LocalUsage(), len(candidates)).admitted)
            if eligible == 0:
                return None
            turn = connection.execute(
                self._q("take_turn"), {"name": "overflow", "holder": worker_id, "now": now, "ttl": interval}
            ).fetchone()
            if turn is None:
                return None
            metadata = {"backlog": eligible, "workers": len(serving), "queues": sorted(queues)}
            connection.execute(self._q("insert_event"), _event(None, "CapacityOverflow", metadata, now))
        return eligible

    # --- limits -------------------------------------------------------------------

    def register_limits(
        self, run_queue: RunQueueConfig | None, queues: Sequence[QueueConfig], implied_queues: Sequence[str]
    ) -> None:
        with self._write() as (connection, now):
            changed = False
            if run_queue is not None:
                changed |= bool(
                    connection.execute(
                        self._q("register_run_queue"), {"value": dumps(run_queue_to_dict(run_queue)), "now": now}
                    ).fetchone()
                )
            for queue in queues:
                changed |= bool(
                    connection.execute(
                        self._q("register_queue"), {"name": queue.name, "config": dumps(queue_to_dict(queue)), "now": now}
                    ).fetchone()
                )
            for name in implied_queues:
                changed |= bool(
                    connection.execute(
                        self._q("register_implied_queue"),
                        {"name": name, "config": dumps(queue_to_dict(QueueConfig(name))), "now": now},
                    ).fetchone()
                )
            if changed:
                connection.execute(self._q("bump_rules_version"), {"now": now})
        if changed:
            self._notifier.notify()  # a raised limit may unblock runs

    def rules(self) -> Rules:
        return self._load_rules(self._connection())

    def set_limit(self, target: str, limit: int | None) -> LimitChange:
        return self._change_limit(target, limit, reset=False)

    def reset_limit(self, target: str) -> LimitChange:
        return self._change_limit(target, None, reset=True)

    def _change_limit(self, target: str, limit: int | None, *, reset: bool) -> LimitChange:
        with self._write() as (connection, now):
            before = self._load_rules(connection)
            if reset:
                row = connection.execute(self._q("reset_override"), {"target": target}).fetchone()
                version = 0 if row is None else row[1]
            else:
                version = connection.execute(
                    self._q("set_override"), {"target": target, "limit": limit, "now": now}
                ).fetchone()[0]
            connection.execute(self._q("bump_rules_version"), {"now": now})
            after = self._load_rules(connection)
            change = LimitChange(target, effective_limit(before, target), effective_limit(after, target), version)
            metadata = {"target": target, "old": change.old, "new": change.new, "version": version, "reset": reset}
            connection.execute(self._q("insert_event"), _event(None, "LimitChanged", metadata, now))
        self._notifier.notify()
        return change

    def limit_overrides(self) -> list[LimitOverride]:
        return [
            LimitOverride(row[0], row[1], row[2], _to_time(row[3]))  # type: ignore[arg-type]
            for row in self._connection().execute(self._q("load_overrides"))
        ]

    def scope_usage(self) -> dict[str, int]:
        return {scope: used for scope, used in self._connection().execute(self._q("scope_usage"))}

    def scope_holders(self, scope: str) -> list[HolderRecord]:
        rows = self._connection().execute(self._q("scope_holders"), {"scope": scope})
        return [records.holder_record(row, _to_time) for row in rows]  # type: ignore[arg-type]

    def list_queued(self, queue: str | None = None, limit: int = 100) -> list[RunRecord]:
        rows = self._connection().execute(self._q("list_queued"), {"queue": queue, "limit": limit})
        return [records.run_record(row, _to_time, _to_json) for row in rows]

    def queue_position(self, run_id: str) -> tuple[int, int]:
        connection = self._connection()
        row = connection.execute(self._q("get_run"), {"id": run_id}).fetchone()
        if row is None:
            raise RunNotFound(f"no run with id {run_id!r}")
        ahead, total = connection.execute(
            self._q("queue_position"),
            {"queue": row["queue"], "priority": row["priority"], "scheduled_at": row["scheduled_at"], "id": run_id},
        ).fetchone()
        return ahead + 1, total

    # --- wake-ups ----------------------------------------------------------------

    def listen(self, callback: Callable[[], None]) -> DatagramListener:
        return DatagramListener(self._wake_folder, self._path, callback)

    def close(self) -> None:
        with self._connections_lock:
            for connection in self._connections:
                connection.close()
            self._connections.clear()
        self._local = threading.local()
        self._notifier.close()


def _event(run_id: str | None, type_: str, metadata: dict[str, Any], now: float) -> dict[str, Any]:
    return {"run_id": run_id, "type": type_, "metadata": dumps(metadata), "now": now}


def _claimed_run(row: sqlite3.Row) -> ClaimedRun:
    return ClaimedRun(
        id=row["id"],
        task=row["task"],
        queue=row["queue"],
        args=json.loads(row["args"]),
        attempt=row["attempt"],
        max_attempts=row["max_attempts"],
        retry_backoff=row["retry_backoff"],
        timeout=row["timeout"],
        suspect=bool(row["suspect"]),
    )


def _statements(script: str) -> Iterator[str]:
    """Split a migration into statements, the way SQLite's own parser sees them (comments and
    quoted ';' included), without executescript's implicit COMMIT, which would break the
    one-transaction-per-migration rule."""
    buffer = ""
    for line in script.splitlines(keepends=True):
        buffer += line
        if sqlite3.complete_statement(buffer):
            if buffer.strip():
                yield buffer.strip()
            buffer = ""
    if buffer.strip() and not all(l.strip().startswith("--") or not l.strip() for l in buffer.splitlines()):
        raise ValueError(f"incomplete SQL statement at the end of a migration: {buffer.strip()[:80]!r}")
