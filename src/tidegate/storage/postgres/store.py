"""PostgreSQL adapter of the storage port (the distributed engine).

Workers on many machines share one database, so the database is the only
clock (`now()` in SQL, never a worker's time) and the only lock (`FOR UPDATE
SKIP LOCKED` on run rows, an advisory lock around migrations, a leased row
for the sweeper's turn). It behaves exactly like the SQLite adapter: same
statuses, events and fencing; only the mechanics differ.

Connections come from a pool in autocommit mode, and each verb is one
explicit transaction whose statements are pipelined: they travel to the
server together and the commit rides with the last batch, so a worker's
cycle costs two round trips however much it reports and claims.

Run-level scopes (limits) follow the claim's three parts (see
`storage.claiming` and `domain.admission`): the cycle reads candidate runs
(`FOR UPDATE SKIP LOCKED`), then locks the row of every scope those
candidates need in key order (`tidegate_scopes`, `FOR UPDATE`) and only then
sums the holder rows, so the usage it decides on cannot change before it
commits; `admit` decides; the same transaction writes the claims, their
holder rows and the block reasons. That costs one more round trip, taken
only when some candidate needs a scope: with no limits declared the cycle
is the same two round trips as before.

Admission ceilings (`max_active`) are checked in the submit's own
transaction, still one round trip: the batch takes one advisory lock per
ceiling it meets, in key order, and only the next statement counts the
active runs and inserts (or inserts nothing), so two submitters can never
both take the last place. The worker registry (`tidegate_workers`) gives
ranks for the fill order and lets the sweep recover the runs of a worker
whose heartbeat stopped.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from operator import itemgetter
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import dict_row
from psycopg.types.json import set_json_loads

from tidegate.domain.admission import LocalUsage, admit
from tidegate.domain.backpressure import RATE_WINDOW_SECONDS, WorkerSlot, claimable_queues, lowest_free_rank, retry_after
from tidegate.domain.errors import (
    AdmissionRejected,
    ConfigurationError,
    RunNotFound,
    StoreUnavailable,
)
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
from tidegate.storage.postgres.connections import CONNECT_TIMEOUT, Connections
from tidegate.storage.postgres.connections import first_line as _first_line
from tidegate.storage.postgres.listener import CHECK_INTERVAL, NotifyListener
from tidegate.storage.postgres.pipeline import transaction
from tidegate.storage.postgres.steps import PostgresStepVerbs
from tidegate.storage.sqlfile import load_queries
from tidegate.storage.urls import masked

POOL_MIN_SIZE = 1
POOL_MAX_SIZE = 8
SWEEPER_LOCK = "sweeper"
OVERFLOW_TURN = "overflow"
OVERFLOW_SAMPLE = 100  # queued runs looked at per queue when deciding whether runs wait for a worker
CANCELED_WHILE_QUEUED = "canceled while queued"
WORKER_SHUTTING_DOWN = "worker shutting down"
_JSON_NUL = "\\u0000"  # how json.dumps writes U+0000, which jsonb and text refuse


def _to_time(value: datetime | None) -> datetime | None:
    """In UTC, like the SQLite adapter, whatever the session's TimeZone."""
    return None if value is None else value.astimezone(UTC)


def _to_json(value: Any) -> Any:
    return value  # already decoded by the connection's jsonb loader (_sorted_loads)


def _sorted_loads(data: bytes) -> Any:
    """Decode JSON with object keys sorted, as the SQLite adapter returns them.

    SQLite keeps the text `dumps(sort_keys=True)` wrote; jsonb keeps its own
    key order (shortest first), which would make the same args, results and
    event metadata iterate differently on the two adapters.
    """
    return json.loads(data, object_pairs_hook=_sorted_object)


def _sorted_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    return dict(sorted(pairs, key=itemgetter(0)))


def _configure(connection: psycopg.Connection[Any]) -> None:
    """Set up each new pooled connection.

    JIT off: every statement here is short, but a plan that counts or sorts
    a large backlog can pass jit_above_cost once the table has statistics,
    and then each call compiles for 40-200 ms (a submit behind 100,000
    queued runs took 45 ms instead of 2 ms)."""
    set_json_loads(_sorted_loads, connection)
    connection.execute("SET jit = off")


class PostgresStore(PostgresStepVerbs):
    def __init__(
        self,
        url: str,
        *,
        min_size: int = POOL_MIN_SIZE,
        max_size: int = POOL_MAX_SIZE,
        listen_check: float = CHECK_INTERVAL,
    ) -> None:
        self.url = url
        self._listen_check = listen_check  # how often a wake-up connection proves it is alive
        self._where = _describe(url)
        self._queries = load_queries("tidegate.storage.postgres")
        self._migrations: list[Migration] = load_migrations("tidegate.storage.postgres.migrations")
        self._rules_cache: tuple[str, Rules] | None = None  # (rules_version, rules)
        # Rank of each worker that joined the fill order through this store: the
        # cycle of any other worker (or of rank 0, which nobody ranks below) then
        # skips reading the registry, so the fill order costs nothing when off.
        self._fill_ranks: dict[str, int] = {}
        self._connections = Connections(
            url, where=self._where, min_size=min_size, max_size=max_size, configure=_configure
        )
        self._connection = self._connections.connection

    def _q(self, name: str) -> str:
        return self._queries[name]

    def _fetchone(self, name: str, params: Mapping[str, Any] | None = None) -> Any:
        """One autocommit statement (a read needs no transaction block)."""
        with self._connection() as connection:
            return connection.execute(self._q(name), params).fetchone()

    def _fetch_dicts(self, name: str, params: Mapping[str, Any]) -> list[dict[str, Any]]:
        with self._connection() as connection:
            return connection.cursor(row_factory=dict_row).execute(self._q(name), params).fetchall()

    # --- schema ---------------------------------------------------------------

    def migrate(self) -> list[int]:
        applied = []
        with self._connection() as connection, connection.transaction():
            connection.execute(self._q("migrate_lock"))
            connection.execute(self._q("migrate_version_table"))
            current = connection.execute(self._q("schema_version")).fetchone()[0]  # type: ignore[index]
            for migration in pending(self._migrations, current):
                connection.execute(migration.sql.encode())  # a script: no parameters, many statements
                connection.execute(
                    self._q("record_migration"), {"version": migration.version, "name": migration.name}
                )
                applied.append(migration.version)
        return applied

    def schema_version(self) -> int:
        with self._connection() as connection:
            exists = connection.execute(self._q("schema_version_exists")).fetchone()
            if not exists or not exists[0]:
                return 0
            return connection.execute(self._q("schema_version")).fetchone()[0]  # type: ignore[index]

    def check_schema(self) -> None:
        check_current(self._migrations, self.schema_version())

    # --- tasks ----------------------------------------------------------------

    def register_tasks(self, tasks: Sequence[TaskDefinition]) -> None:
        if not tasks:
            return
        latest = {task.name: task for task in tasks}  # an upsert may touch a row only once
        rows = [
            {
                "name": task.name,
                "queue": task.queue,
                "priority": task.priority,
                "tags": task.tags,
                "max_attempts": task.max_attempts,
                "retry_backoff": task.retry_backoff,
                "timeout": task.timeout,
                "dispatch_deadline": task.dispatch_deadline,
            }
            for task in latest.values()
        ]
        with self._connection() as connection, transaction(connection):
            connection.execute(self._q("register_tasks"), {"tasks": _payload_json(rows)})

    def get_task(self, name: str) -> TaskDefinition | None:
        rows = self._fetch_dicts("get_task", {"name": name})
        return records.task_definition(rows[0], _to_json) if rows else None

    # --- runs -------------------------------------------------------------------

    def enqueue(self, runs: Sequence[NewRun]) -> None:
        if not runs:
            return
        payload = _enqueue_payload(runs)
        queues = sorted({run.queue for run in runs})
        with self._connection() as connection:
            # READ COMMITTED whatever the server's default: the count must see every submit
            # committed before the ceiling's lock was granted.
            with transaction(connection, b"BEGIN ISOLATION LEVEL READ COMMITTED"):
                connection.execute(self._q("enqueue_fence"))
                connection.execute(self._q("enqueue_lock"), {"queues": queues})
                refused = connection.execute(self._q("enqueue"), {"runs": payload, "window": RATE_WINDOW_SECONDS})
                connection.execute(self._q("notify"))  # a refused batch stored nothing: a spare wake-up at worst
            row = refused.fetchone()
        if row is not None:
            queue, active, ceiling, incoming, recent = row
            raise AdmissionRejected(
                "all queues" if queue is None else f"queue {queue}",
                active,
                ceiling,
                retry_after(active, ceiling, incoming, recent),
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
        """Report, then claim, in one transaction of pipelined batches.

        The first batch records starts and outcomes (releasing the scopes of
        ended attempts), asks for cancel requests, checks the rules version
        and reads and locks the claim candidates; when some candidate needs a
        scope, a second batch locks the scopes and reads their usage; the last
        writes what `admit` decided (and, when the claim fell short, asks when
        the next run falls due) and commits. The transaction is READ COMMITTED
        whatever the server's default: the usage read must see every claim
        committed before the scope lock was granted. A worker in the fill
        order above rank 0 first reads the registry (one more round trip) to
        learn which of its queues it may claim from; no other worker does.
        """
        queue_list = list(queues)
        reported, outcome_payload = _outcome_payload(outcomes)
        with self._connection() as connection:
            with transaction(connection, b"BEGIN ISOLATION LEVEL READ COMMITTED"):
                applied = None
                if starts or outcomes:
                    applied = connection.execute(
                        self._q("cycle_reports"),
                        {**_start_arrays(starts), "outcomes": outcome_payload, "worker": worker_id},
                    )
                if outcomes:
                    connection.execute(self._q("notify"))  # finished runs may be waited on, and free capacity
                cancels = connection.execute(self._q("cancel_requests"), {"worker": worker_id})
                claim, due, more = None, None, False
                if claim_limit > 0 and self._fill_ranks.get(worker_id, 0) > 0:
                    queue_list = self._fill_order_queues(connection, worker_id, queue_list)
                if claim_limit > 0 and queue_list:
                    connection.execute(self._q("claim_fence"))
                    claim, due, more = _Claim(self, connection, worker_id, queue_list, claim_limit, lease_seconds).run()
            applied_fences = set() if applied is None else {(row[0], row[1]) for row in applied.fetchall()}
            cancel_requested = [(row[0], row[1]) for row in cancels.fetchall()]
            claimed = [] if claim is None else [_claimed_run(row) for row in claim.fetchall()]
            next_due_in = None if due is None else due.fetchone()[0]  # type: ignore[index]
        fenced_out = [fence for fence in reported if fence not in applied_fences]
        return CycleResult(claimed, fenced_out, cancel_requested, next_due_in, more)

    def _fill_order_queues(
        self, connection: psycopg.Connection[Any], worker_id: str, queues: list[str]
    ) -> list[str]:
        """The queues a worker in the fill order may claim from now (a round trip: the registry)."""
        rows = connection.cursor(row_factory=dict_row).execute(self._q("worker_fill_state")).fetchall()
        slots = {row["id"]: (row["fill_order"], _worker_slot(row)) for row in rows}
        mine = slots.get(worker_id)
        if mine is None or not mine[0]:
            return queues
        allowed = claimable_queues(mine[1], [slot for fill, slot in slots.values() if fill])
        return [queue for queue in queues if queue in allowed]

    def _rules_from_row(self, row: Sequence[Any] | None) -> Rules | None:
        """The rules a `load_rules` row describes: the cached ones when it says they did not
        move; None when it carries only a version that is no longer the cached one."""
        if row is None:
            raise StoreUnavailable("the rules version is missing: run 'tidegate db migrate'")
        version, run_queue, queues, overrides = row
        cached = self._rules_cache
        if queues is None:
            return cached[1] if cached is not None and cached[0] == version else None
        rules = Rules(
            run_queue=run_queue_from_dict(json.loads(run_queue)) if run_queue else RunQueueConfig(),
            queues={config.name: config for config in (queue_from_dict(item) for item in queues)},
            overrides={target: limit for target, limit in overrides},
        )
        self._rules_cache = (version, rules)
        return rules

    def _known_rules_version(self) -> str | None:
        cached = self._rules_cache
        return None if cached is None else cached[0]

    def renew_leases(self, worker_id: str, held: Sequence[Fence], lease_seconds: float) -> list[Fence]:
        if not held:
            return []
        with self._connection() as connection:  # one statement: its own transaction
            renewed = {
                (row[0], row[1])
                for row in connection.execute(
                    self._q("renew_leases"), {**_fence_arrays(held), "worker": worker_id, "lease": lease_seconds}
                ).fetchall()
            }
        return [(run_id, attempt) for run_id, attempt in held if (run_id, attempt) not in renewed]

    def hand_back(self, worker_id: str, held: Sequence[Fence]) -> list[str]:
        if not held:
            return []
        with self._connection() as connection:
            with transaction(connection):
                back = connection.execute(
                    self._q("hand_back"),
                    {**_fence_arrays(held), "worker": worker_id, "reason": WORKER_SHUTTING_DOWN},
                )
                connection.execute(self._q("notify"))
            return [row[0] for row in back.fetchall()]

    def sweep(self, sweeper_id: str, interval: float) -> SweepReport | None:
        with self._connection() as connection, transaction(connection):
            turn = connection.execute(
                self._q("take_lock"), {"name": SWEEPER_LOCK, "holder": sweeper_id, "ttl": 3 * interval}
            ).fetchone()
            if turn is None:
                return None
            lost = connection.cursor(row_factory=dict_row).execute(self._q("sweep_lost")).fetchall()
            verdicts = rescue.payload(rescue.decide(lost))
            recovered = connection.execute(self._q("sweep_recover"), {"verdicts": _payload_json(verdicts)})
            connection.execute(self._q("forget_dead_workers"))
            leaks = connection.execute(self._q("sweep_leaks"))
            expired_steps = self._sweep_step_holders(connection)
            late = connection.execute(self._q("sweep_deadlines"))
            report = SweepReport(
                leaks_repaired=leaks.fetchone()[0],  # type: ignore[index]
                step_slots_expired=expired_steps.fetchone()[0],  # type: ignore[index]
            )
            report.failed.extend(row[0] for row in late.fetchall())
            rescue.add_to_report(report, dict(recovered.fetchall()))
            if report:
                connection.execute(self._q("notify"))  # freed slots and requeued runs: claim again now
        return report

    def cancel_run(self, run_id: str) -> RunStatus:
        """Cancel if queued, else ask the running worker; one round trip.

        `request_cancel` runs after `cancel_queued` in the same transaction
        and so matches nothing once the run was canceled while queued.
        """
        params = {"id": run_id, "reason": CANCELED_WHILE_QUEUED}
        with self._connection() as connection:
            with transaction(connection):
                connection.execute(self._q("cancel_queued"), params)
                connection.execute(self._q("request_cancel"), params)
                status = connection.execute(self._q("run_status"), params)
                connection.execute(self._q("notify"))
            row = status.fetchone()
        if row is None:
            raise RunNotFound(f"no run with id {run_id!r}")
        return RunStatus(row[0])

    def pending_count(self, queues: Sequence[str]) -> int:
        return self._fetchone("pending_count", {"queues": list(queues)})[0]

    # --- reading ----------------------------------------------------------------

    def get_run(self, run_id: str) -> RunRecord | None:
        rows = self._fetch_dicts("get_run", {"id": run_id})
        return records.run_record(rows[0], _to_time, _to_json) if rows else None

    def list_runs(
        self, status: RunStatus | None = None, queue: str | None = None, limit: int = 100
    ) -> list[RunRecord]:
        rows = self._fetch_dicts(
            "list_runs", {"status": status.value if status else None, "queue": queue, "limit": limit}
        )
        return [records.run_record(row, _to_time, _to_json) for row in rows]

    def run_events(self, run_id: str) -> list[EventRecord]:
        rows = self._fetch_dicts("run_events", {"run_id": run_id})
        return [records.event_record(row, _to_time, _to_json) for row in rows]

    def status_counts(self, queue: str | None = None) -> dict[RunStatus, int]:
        counts = dict.fromkeys(RunStatus, 0)
        with self._connection() as connection:
            for status, count in connection.execute(self._q("status_counts"), {"queue": queue}).fetchall():
                counts[RunStatus(status)] = count
        return counts

    # --- workers ------------------------------------------------------------------

    def register_worker(
        self, worker_id: str, capacity: int, queues: Sequence[str], fill_order: bool, ttl: float
    ) -> int:
        with self._connection() as connection, transaction(connection):
            connection.execute(self._q("register_worker_lock"))
            live = dict(connection.execute(self._q("live_worker_ranks")).fetchall())
            rank = live.get(worker_id)
            if rank is None:
                rank = lowest_free_rank(list(live.values()))
            params = {
                "id": worker_id,
                "rank": rank,
                "capacity": capacity,
                "queues": dumps(sorted(queues)),
                "fill_order": fill_order,
                "ttl": ttl,
            }
            connection.execute(self._q("register_worker"), params)
        if fill_order:
            self._fill_ranks[worker_id] = rank
        else:
            self._fill_ranks.pop(worker_id, None)
        return rank

    def heartbeat_worker(self, worker_id: str, ttl: float) -> bool:
        with self._connection() as connection:  # one statement: its own transaction
            row = connection.execute(self._q("heartbeat_worker"), {"id": worker_id, "ttl": ttl}).fetchone()
        return row is not None

    def deregister_worker(self, worker_id: str) -> None:
        with self._connection() as connection, transaction(connection):
            connection.execute(self._q("deregister_worker"), {"id": worker_id})
            connection.execute(self._q("release_locks"), {"id": worker_id})
            connection.execute(self._q("notify"))  # higher-ranked workers may now claim
        self._fill_ranks.pop(worker_id, None)

    def check_overflow(self, worker_id: str, queues: Sequence[str], interval: float) -> int | None:
        """Raise the overflow signal (once per interval, across workers) when eligible runs wait for a worker.

        Eligible means the claim policy would admit it were there room: runs
        held back by a limit do not count. Only when every live worker serving
        these queues is full; returns the backlog when this call raised it.
        Called only by a full worker, so its round trips stay off the hot path.
        """
        with self._connection() as connection, transaction(connection):
            workers = connection.cursor(row_factory=dict_row).execute(self._q("worker_fill_state")).fetchall()
            serving = [row for row in workers if set(row["queues"]) & set(queues)]
            if not serving or any(row["running"] < row["capacity"] for row in serving):
                return None
            rules = self._parse_rules(connection.execute(self._q("load_rules"), {"known": None}).fetchone())
            usage = dict(connection.execute(self._q("scope_usage")).fetchall())
            rows = connection.cursor(row_factory=dict_row).execute(
                self._q("check_overflow_window"), {"queues": list(queues), "limit": OVERFLOW_SAMPLE}
            ).fetchall()
            candidates = [
                claiming.to_candidate(row, rules, row["tags"], row["scheduled_at"].timestamp()) for row in rows
            ]
            eligible = len(admit(candidates, usage, rules, LocalUsage(), len(candidates)).admitted)
            if eligible == 0:
                return None
            turn = connection.execute(
                self._q("take_turn"), {"name": OVERFLOW_TURN, "holder": worker_id, "ttl": interval}
            ).fetchone()
            if turn is None:
                return None
            metadata = {"backlog": eligible, "workers": len(serving), "queues": sorted(queues)}
            connection.execute(
                self._q("insert_event"), {"run_id": None, "type": "CapacityOverflow", "metadata": dumps(metadata)}
            )
        return eligible

    # --- limits -------------------------------------------------------------------

    def register_limits(
        self, run_queue: RunQueueConfig | None, queues: Sequence[QueueConfig], implied_queues: Sequence[str]
    ) -> None:
        params = {
            "run_queue": None if run_queue is None else dumps(run_queue_to_dict(run_queue)),
            "queues": _payload_json([{"name": queue.name, "config": queue_to_dict(queue)} for queue in queues]),
            "implied": _payload_json(
                [{"name": name, "config": queue_to_dict(QueueConfig(name))} for name in implied_queues]
            ),
        }
        with self._connection() as connection, transaction(connection):
            connection.execute(self._q("rules_fence"))  # waits for claims in flight; the next ones see the change
            connection.execute(self._q("register_limits"), params)

    def rules(self) -> Rules:
        rules = self._rules_from_row(self._fetchone("load_rules", {"known": self._known_rules_version()}))
        if rules is None:
            rules = self._rules_from_row(self._fetchone("load_rules", {"known": None}))
        return rules  # type: ignore[return-value]

    def set_limit(self, target: str, limit: int | None) -> LimitChange:
        return self._change_limit(target, limit, reset=False)

    def reset_limit(self, target: str) -> LimitChange:
        return self._change_limit(target, None, reset=True)

    def _change_limit(self, target: str, limit: int | None, *, reset: bool) -> LimitChange:
        """Change an override under the rules fence: no claim is in flight meanwhile, so
        `before` is what every claim used until now and `after` what every later one uses."""
        with self._connection() as connection, transaction(connection):
            connection.execute(self._q("rules_fence"))
            before_row = connection.execute(self._q("load_rules"), {"known": None})
            if reset:
                changed = connection.execute(self._q("reset_override"), {"target": target})
            else:
                changed = connection.execute(self._q("set_override"), {"target": target, "limit": limit})
            connection.execute(self._q("bump_rules_version"))
            after_row = connection.execute(self._q("load_rules"), {"known": None})
            before = self._parse_rules(before_row.fetchone())
            row = changed.fetchone()
            version = (0 if row is None else row[1]) if reset else row[0]  # type: ignore[index]
            after = self._parse_rules(after_row.fetchone())
            change = LimitChange(target, effective_limit(before, target), effective_limit(after, target), version)
            metadata = {"target": target, "old": change.old, "new": change.new, "version": version, "reset": reset}
            connection.execute(
                self._q("insert_event"), {"run_id": None, "type": "LimitChanged", "metadata": dumps(metadata)}
            )
            connection.execute(self._q("notify"))  # a raised limit may unblock runs
        return change

    def _parse_rules(self, row: Sequence[Any] | None) -> Rules:
        rules = self._rules_from_row(row)  # a complete row (known=None): never None
        assert rules is not None
        return rules

    def limit_overrides(self) -> list[LimitOverride]:
        with self._connection() as connection:
            rows = connection.execute(self._q("load_overrides")).fetchall()
        return [LimitOverride(target, limit, version, _to_time(at)) for target, limit, version, at in rows]  # type: ignore[arg-type]

    def scope_usage(self) -> dict[str, int]:
        with self._connection() as connection:
            return {scope: used for scope, used in connection.execute(self._q("scope_usage")).fetchall()}

    def scope_holders(self, scope: str) -> list[HolderRecord]:
        rows = self._fetch_dicts("scope_holders", {"scope": scope})
        return [records.holder_record(row, _to_time) for row in rows]

    def list_queued(self, queue: str | None = None, limit: int = 100) -> list[RunRecord]:
        rows = self._fetch_dicts("list_queued", {"queue": queue, "limit": limit})
        return [records.run_record(row, _to_time, _to_json) for row in rows]

    def queue_position(self, run_id: str) -> tuple[int, int]:
        row = self._fetchone("queue_position", {"id": run_id})
        if row is None:
            raise RunNotFound(f"no run with id {run_id!r}")
        ahead, total = row
        return ahead + 1, total

    # --- wake-ups ----------------------------------------------------------------

    def listen(self, callback: Callable[[], None]) -> NotifyListener:
        return NotifyListener(
            self.url,
            self._q("listen_channel"),
            callback,
            connect_timeout=CONNECT_TIMEOUT,
            check_interval=self._listen_check,
        )

    def close(self) -> None:
        self._connections.close()


# --- the claim ---------------------------------------------------------------------


class _Claim:
    """One claim inside a cycle's transaction: read candidates, lock their scopes, admit, write.

    Round trips: the first reads (rules version, the head of each queue, usage
    as a hint of what is full, this worker's own counts) travel with the
    cycle's first batch, sent as the cached rules call for them; the scope
    locks and the usage they guard make a second batch, only when some
    candidate needs a scope; the writes ride with the commit. Reading past a
    head that is all waiting (runs of full tags, other partitions' heads), a
    fair queue, or rules that changed, each add one.

    Every read `claiming` asks for that was not sent ahead is read when asked:
    what is sent ahead only saves round trips, it never decides anything.
    """

    def __init__(
        self,
        store: PostgresStore,
        connection: psycopg.Connection[Any],
        worker_id: str,
        queues: list[str],
        limit: int,
        lease_seconds: float,
    ) -> None:
        self.store = store
        self.connection = connection
        self.worker_id = worker_id
        self.queues = queues
        self.limit = limit
        self.lease_seconds = lease_seconds
        self.rules = Rules()
        self.hint: dict[str, int] = {}  # slots in use before the scope lock: what to read, never the decision
        self.local = LocalUsage()
        self.windows: dict[tuple[str, int, tuple[tuple[str, str], ...]], list[dict[str, Any]]] = {}
        self.heads: dict[tuple[str, str, tuple[tuple[str, str], ...]], tuple[int, list[dict[str, Any]]]] = {}
        self.lanes: dict[tuple[str, str], int] | None = None
        self.turns: set[str] = set()  # queues whose claim turn this transaction holds

    def run(self) -> tuple[psycopg.Cursor[Any] | None, psycopg.Cursor[Any] | None, bool]:
        """Queue the claim: the cursors of the claim and of the next-due probe (None when not
        sent; their rows arrive with the commit), and whether to claim again at once (the
        read came back full and not all of it could be taken)."""
        store, connection = self.store, self.connection
        cached = store._rules_cache
        rules_cursor = connection.execute(store._q("load_rules"), {"known": None if cached is None else cached[0]})
        sent = None
        if cached is not None:
            self._take_turns(cached[1])
            sent = self._send_reads(cached[1])
        rules = store._rules_from_row(rules_cursor.fetchone())  # ends the first batch
        if rules is None:  # the cache moved meanwhile (another thread): read the rules whole
            rules = store._parse_rules(connection.execute(store._q("load_rules"), {"known": None}).fetchone())
        self.rules = rules
        if sent is None or rules is not cached[1]:  # type: ignore[index]
            if not self._take_turns(rules):
                # A queue these rules serialize came after one already held: taking its turn
                # now could deadlock with a claimer that waits the other way. Look again at once.
                return None, connection.execute(store._q("due_now")), False
            sent = self._send_reads(rules)
        self._receive_reads(sent)
        reader = claiming.CandidateReader(self._window, self._partitions, self._partition_head)
        found = claiming.candidate_rows(self.queues, self.limit, rules, self.hint, reader, self.local)
        rows = found.rows
        if not rows:
            return None, self._next_due(), False
        keys: list[str] = []
        if any(claiming.limited(queue, rules) for queue in self.queues):
            keys = claiming.scope_keys(rows, rules)
        lanes_cursor = None
        fair = claiming.fair_lanes(self.queues, rules)
        if fair and self.lanes is None:
            lanes_cursor = connection.execute(store._q("lane_load"), {"queues": fair})
        usage: dict[str, int] = {}
        if keys:
            connection.execute(store._q("upsert_scopes"), {"keys": keys})
            connection.execute(store._q("lock_scopes"), {"keys": keys})
            usage = dict(connection.execute(store._q("scope_usage_of"), {"keys": keys}).fetchall())
        lanes = self.lanes if lanes_cursor is None else _lane_load(lanes_cursor)
        if any(row["suspect"] for row in rows):  # a suspect is taken only by an idle worker: count what it runs
            self.local = _local_usage(connection.execute(store._q("local_usage"), {"worker": self.worker_id}))
        candidates = [
            claiming.to_candidate(row, rules, row["tags"] or {}, row["scheduled_at"].timestamp()) for row in rows
        ]
        decision = admit(candidates, usage, rules, self.local, self.limit, lanes or None)
        changed = claiming.changed_block_reasons(decision, {row["id"]: row["block_reason"] for row in rows})
        if changed:
            reasons = [
                {"n": index, "id": run_id, "reason": json.loads(reason)}
                for index, (run_id, reason) in enumerate(changed.items())
            ]
            connection.execute(store._q("set_block_reasons"), {"reasons": _payload_json(reasons)})
        if not decision.admitted:
            return None, self._next_due(), False
        if len(decision.admitted) == self.limit and self.worker_id in store._fill_ranks:
            # A full claim may leave work for the next worker in the fill order, which only looks when told.
            connection.execute(store._q("notify"))
        holders = [(need.key, candidate.id) for candidate, needs in decision.admitted for need in needs]
        claim = connection.execute(
            store._q("claim_runs"),
            {
                "ids": [candidate.id for candidate, _ in decision.admitted],
                "holder_scopes": [scope for scope, _ in holders],
                "holder_runs": [run_id for _, run_id in holders],
                "worker": self.worker_id,
                "lease": self.lease_seconds,
            },
        )
        short = len(decision.admitted) < self.limit  # every admitted run is locked, so all are claimed
        return claim, self._next_due() if short else None, found.exhausted and short

    def _take_turns(self, rules: Rules) -> bool:
        """Wait for this claimer's turn at every queue these rules serialize, in name order.

        A queue some limit applies to, or a fair queue, is claimed by one
        claimer at a time, as on SQLite: concurrent claimers would each lock
        (SKIP LOCKED) part of the head of the queue, and one whose share is all
        waiting (its local limit, a full partition) would find nothing while the
        runs it could start sit locked by another; and fair turns would be
        judged on running counts that change underneath. Queues no limit
        applies to keep claiming in parallel. Returns False, taking nothing, if
        a turn would be taken out of order (the rules changed mid-claim).
        """
        needed = sorted(
            {
                queue
                for queue in self.queues
                if claiming.limited(queue, rules) or queue in claiming.fair_lanes([queue], rules)
            }
            - self.turns
        )
        if needed and self.turns and needed[0] < max(self.turns):
            return False
        for queue in needed:
            self.connection.execute(self.store._q("claim_turn"), {"queue": queue})
        self.turns.update(needed)
        return True

    def _next_due(self) -> psycopg.Cursor[Any]:
        return self.connection.execute(self.store._q("next_due"), {"queues": self.queues})

    # --- reads ------------------------------------------------------------------------

    def _send_reads(self, rules: Rules) -> dict[str, Any]:
        """Queue (without waiting) the reads these rules will ask for first: the head of each
        queue as `claiming` reads it first, usage, this worker's counts, fair lanes."""
        store, connection = self.store, self.connection
        sent: dict[str, Any] = {"windows": []}
        limited = [queue for queue in self.queues if claiming.limited(queue, rules)]
        plain = [queue for queue in self.queues if queue not in rules.queues or rules.queues[queue].ordering != "fair"]
        if plain:
            sizes = [claiming.window_size(queue, self.limit, rules) for queue in plain]
            cursor = connection.cursor(row_factory=dict_row).execute(
                store._q("claim_window"),
                {"queues": plain, "sizes": sizes, "tags": _uses_tags(rules), "excluded": "[]"},
            )
            sent["windows"] = [(queue, size, cursor) for queue, size in zip(plain, sizes, strict=True)]
        if limited:
            sent["hint"] = connection.execute(store._q("scope_usage"))
            sent["local"] = connection.execute(store._q("local_usage"), {"worker": self.worker_id})
        fair = claiming.fair_lanes(self.queues, rules)
        if fair:
            sent["lanes"] = connection.execute(store._q("lane_load"), {"queues": fair})
        return sent

    def _receive_reads(self, sent: dict[str, Any]) -> None:
        rows_of: dict[str, list[dict[str, Any]]] = {}
        cursors = {id(cursor): cursor for _, _, cursor in sent["windows"]}
        for cursor in cursors.values():
            for row in cursor.fetchall():
                rows_of.setdefault(row["queue"], []).append(row)
        for queue, size, _ in sent["windows"]:
            self.windows[(queue, size, ())] = rows_of.get(queue, [])
        if "hint" in sent:
            self.hint = dict(sent["hint"].fetchall())
        if "local" in sent:
            self.local = _local_usage(sent["local"])
        if "lanes" in sent:
            self.lanes = _lane_load(sent["lanes"])

    def _window(self, queue: str, size: int, excluded: Sequence[tuple[str, str]]) -> list[dict[str, Any]]:
        key = (queue, size, tuple(excluded))
        if key not in self.windows:
            params = {
                "queues": [queue],
                "sizes": [size],
                "tags": _uses_tags(self.rules),
                "excluded": _excluded_json(excluded),
            }
            cursor = self.connection.cursor(row_factory=dict_row)
            self.windows[key] = cursor.execute(self.store._q("claim_window"), params).fetchall()
        return self.windows[key]

    def _partitions(self, queue: str, size: int) -> list[str]:
        """The partitions of a queue, with their heads read (and locked) in the same statement.

        Reads each head as `claiming` will ask for it (one run of a full
        partition, a fair share of the claim limit of the others, runs of
        full tags left out); any head asked for differently is read again.
        """
        saturated = sorted(
            claiming.saturated_partitions(queue, self.hint, self.rules)
            | claiming.locally_full_partitions(queue, self.local, self.rules)
        )
        excluded = tuple(claiming.saturated_tags(self.hint, self.rules))
        params = {
            "queue": queue,
            "limit": size,
            "saturated": saturated,
            "claim_limit": self.limit,
            "tags": _uses_tags(self.rules),
            "excluded": _excluded_json(excluded),
        }
        heads: dict[str, tuple[int, list[dict[str, Any]]]] = {}
        cursor = self.connection.cursor(row_factory=dict_row)
        for row in cursor.execute(self.store._q("claim_partitions"), params).fetchall():
            key, per_partition = row.pop("key"), row.pop("per_partition")
            read, rows = heads.setdefault(key, (1 if key in saturated else per_partition, []))
            if row["id"] is not None:
                rows.append(row)
        for key, (read, rows) in heads.items():
            rows.sort(key=_claim_order)
            self.heads[(queue, key, excluded)] = (read, rows)
        return sorted(heads)  # bytewise, as the partition index orders them

    def _partition_head(
        self, queue: str, partition: str, size: int, excluded: Sequence[tuple[str, str]]
    ) -> list[dict[str, Any]]:
        known = self.heads.get((queue, partition, tuple(excluded)))
        if known is not None and (known[0] >= size or len(known[1]) < known[0]):
            return known[1][:size]  # read as many as asked, or all there were
        params = {
            "queue": queue,
            "partition": partition,
            "limit": size,
            "tags": _uses_tags(self.rules),
            "excluded": _excluded_json(excluded),
        }
        cursor = self.connection.cursor(row_factory=dict_row)
        return cursor.execute(self.store._q("claim_partition_head"), params).fetchall()


def _claim_order(row: Mapping[str, Any]) -> tuple[int, datetime, str]:
    return (-row["priority"], row["scheduled_at"], row["id"])


def _excluded_json(excluded: Sequence[tuple[str, str]]) -> str:
    """Full tags as a JSON list of one-pair objects, for `tags @> tag` in SQL."""
    return dumps([{key: value} for key, value in excluded])


def _uses_tags(rules: Rules) -> bool:
    """Whether any tag limit exists, so that a run's tags may decide a scope."""
    return bool(rules.run_queue.tag_concurrency_limits) or any(target.startswith("tag:") for target in rules.overrides)


def _local_usage(cursor: psycopg.Cursor[Any]) -> LocalUsage:
    """What this worker runs, per queue and per (queue, partition)."""
    local = LocalUsage()
    for queue, partition, count in cursor.fetchall():
        local.per_queue[queue] = local.per_queue.get(queue, 0) + count
        local.per_partition[(queue, partition)] = count
    return local


def _lane_load(cursor: psycopg.Cursor[Any]) -> dict[tuple[str, str], int]:
    return {(queue, partition): count for queue, partition, count in cursor.fetchall()}


# --- transactions ----------------------------------------------------------------


# --- payloads ------------------------------------------------------------------


def _payload_json(rows: list[dict[str, Any]]) -> str:
    """A batch as one JSON document for jsonb_to_recordset (order kept in `n`)."""
    return dumps(rows)


def _fence_arrays(fences: Sequence[Fence]) -> dict[str, list[Any]]:
    return {"ids": [run_id for run_id, _ in fences], "attempts": [attempt for _, attempt in fences]}


def _start_arrays(starts: Sequence[Fence]) -> dict[str, list[Any]]:
    unique = list(dict.fromkeys((run_id, attempt) for run_id, attempt in starts))
    arrays = _fence_arrays(unique)
    return {"start_ids": arrays["ids"], "start_attempts": arrays["attempts"]}


def _enqueue_payload(runs: Sequence[NewRun]) -> str:
    """Args, tags and keys hold no NUL: submit refuses them on both adapters (domain/jsonvalue.py)."""
    return _payload_json([_new_run_row(index, run) for index, run in enumerate(runs)])


def _new_run_row(index: int, run: NewRun) -> dict[str, Any]:
    return {
        "n": index,
        "id": run.id,
        "task": run.task,
        "queue": run.queue,
        "partition_key": run.partition,
        "priority": run.priority,
        "args": run.args,
        "tags": run.tags,
        "concurrency_key": run.concurrency_key,
        "max_attempts": run.max_attempts,
        "retry_backoff": run.retry_backoff,
        "timeout": run.timeout,
        "delay": run.delay,
        "deadline": run.deadline,
    }


def _outcome_payload(outcomes: Sequence[Outcome]) -> tuple[list[Fence], str]:
    """The fences reported (once each) and the rows to apply, as one JSON document."""
    if not outcomes:
        return [], "[]"
    rows = _outcome_rows(outcomes)
    text = _payload_json(list(rows.values()))
    if _JSON_NUL in text:
        rows = _outcome_rows([_storable(outcome) for outcome in outcomes])
        text = _payload_json(list(rows.values()))
    return list(rows), text


def _outcome_rows(outcomes: Sequence[Outcome]) -> dict[Fence, dict[str, Any]]:
    """One row per fence (the last report wins, as on SQLite), with its event precomputed."""
    rows: dict[Fence, dict[str, Any]] = {}
    for outcome in outcomes:
        status = records.outcome_status(outcome.kind.value, outcome.retry_delay)
        rows[(outcome.run_id, outcome.attempt)] = {
            "id": outcome.run_id,
            "attempt": outcome.attempt,
            "status": status,
            "result": outcome.result,
            "error": outcome.error,
            "delay": outcome.retry_delay,
            "event": records.EVENT_FOR_STATUS[status],
            "metadata": _outcome_metadata(outcome, status),
        }
    for index, row in enumerate(rows.values()):
        row["n"] = index
    return rows


def _outcome_metadata(outcome: Outcome, status: str) -> dict[str, Any]:
    metadata: dict[str, Any] = {"attempt": outcome.attempt}
    if outcome.error is not None:
        metadata["error"] = outcome.error
    if status == "queued":
        metadata["retry_in"] = round(outcome.retry_delay or 0.0, 3)
    return metadata


def _storable(outcome: Outcome) -> Outcome:
    """PostgreSQL refuses U+0000 in text; without this one error message would sink the whole cycle.

    (A result never holds it: the worker refuses such a result on both adapters, domain/jsonvalue.py.)
    """
    if outcome.error is None or "\x00" not in outcome.error:
        return outcome
    error = outcome.error.replace("\x00", "\\x00")
    return Outcome(outcome.run_id, outcome.attempt, outcome.kind, outcome.result, error, outcome.retry_delay)


def _worker_slot(row: Mapping[str, Any]) -> WorkerSlot:
    return WorkerSlot(row["id"], row["rank"], row["capacity"], row["running"], frozenset(row["queues"]))


def _claimed_run(row: tuple[Any, ...]) -> ClaimedRun:
    run_id, task, queue, args, attempt, max_attempts, retry_backoff, timeout, suspect = row
    return ClaimedRun(
        id=run_id,
        task=task,
        queue=queue,
        args=args,
        attempt=attempt,
        max_attempts=max_attempts,
        retry_backoff=retry_backoff,
        timeout=timeout,
        suspect=suspect,
    )


# --- errors ----------------------------------------------------------------------


def _describe(url: str) -> str:
    """host:port/dbname for messages, never the password."""
    try:
        params = conninfo_to_dict(url)
    except psycopg.ProgrammingError as error:
        raise ConfigurationError(f"invalid PostgreSQL URL {masked(url)!r}: {masked(_first_line(error), url)}") from None
    host = params.get("host") or "localhost"
    port = params.get("port") or "5432"
    return f"{host}:{port}/{params.get('dbname') or params.get('user') or ''}"
