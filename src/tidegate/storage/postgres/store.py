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
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from operator import itemgetter
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.pq import ConnStatus, TransactionStatus
from psycopg.rows import dict_row
from psycopg.types.json import set_json_loads
from psycopg_pool import ConnectionPool, PoolTimeout

from tidegate.domain.errors import ConfigurationError, InvalidArgument, RunNotFound, StoreUnavailable
from tidegate.domain.jsonvalue import dumps
from tidegate.domain.model import (
    ClaimedRun,
    CycleResult,
    EventRecord,
    NewRun,
    Outcome,
    OutcomeKind,
    RunRecord,
    RunStatus,
    SweepReport,
    TaskDefinition,
)
from tidegate.storage import records
from tidegate.storage.migrations import Migration, check_current, load_migrations, pending
from tidegate.storage.port import Fence
from tidegate.storage.postgres.listener import NotifyListener
from tidegate.storage.sqlfile import load_queries

CONNECT_TIMEOUT = 5.0
POOL_MIN_SIZE = 1
POOL_MAX_SIZE = 8
SWEEPER_LOCK = "sweeper"
CANCELED_WHILE_QUEUED = "canceled while queued"
WORKER_SHUTTING_DOWN = "worker shutting down"
LEASE_EXPIRED = "lease expired"
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
    """Set up each new pooled connection."""
    set_json_loads(_sorted_loads, connection)


class PostgresStore:
    def __init__(self, url: str, *, min_size: int = POOL_MIN_SIZE, max_size: int = POOL_MAX_SIZE) -> None:
        self.url = url
        self._where = _describe(url)
        self._max_size = max_size
        self._queries = load_queries("tidegate.storage.postgres")
        self._migrations: list[Migration] = load_migrations("tidegate.storage.postgres.migrations")
        self._probe()
        self._pool = ConnectionPool(
            url,
            min_size=min_size,
            max_size=max_size,
            kwargs={"autocommit": True, "connect_timeout": round(CONNECT_TIMEOUT)},
            timeout=CONNECT_TIMEOUT,
            configure=_configure,
            open=False,
            name="tidegate",
        )
        try:
            self._pool.open(wait=True, timeout=CONNECT_TIMEOUT)
        except PoolTimeout:
            self._pool.close()
            raise StoreUnavailable(
                f"cannot connect to PostgreSQL at {self._where}: no connection within {CONNECT_TIMEOUT:g}s"
            ) from None

    # --- connections and transactions ------------------------------------------

    @contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection; a server that cannot be reached becomes StoreUnavailable."""
        try:
            connection = self._live_connection()
            try:
                yield connection
            finally:
                self._pool.putconn(connection)
        except PoolTimeout:
            raise StoreUnavailable(
                f"cannot connect to PostgreSQL at {self._where}: no connection within {CONNECT_TIMEOUT:g}s"
            ) from None
        except psycopg.OperationalError as error:
            if not _connection_lost(error):
                raise
            raise StoreUnavailable(
                f"lost the connection to PostgreSQL at {self._where}: {_first_line(error)}"
            ) from error

    def _live_connection(self) -> psycopg.Connection[Any]:
        """A pooled connection whose server has not hung up while it sat idle.

        After a server restart every idle connection in the pool is dead;
        handing one out would fail a verb that a fresh connection would pass.
        The pool's own `check` costs a round trip per checkout, and backs off
        a second after each failure; this costs a non-blocking read.
        """
        for _ in range(self._max_size):
            connection = self._pool.getconn()
            if _alive(connection):
                return connection
            connection.close()
            self._pool.putconn(connection)  # the pool drops it and opens a replacement
        return self._pool.getconn()

    def _probe(self) -> None:
        """Connect once, so that a wrong URL or a server that is down fails fast and says why.

        The pool would retry in the background until its timeout and then
        only report that it timed out.
        """
        try:
            psycopg.connect(self.url, connect_timeout=round(CONNECT_TIMEOUT)).close()
        except psycopg.Error as error:
            raise StoreUnavailable(f"cannot connect to PostgreSQL at {self._where}: {_first_line(error)}") from None

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
            }
            for task in latest.values()
        ]
        with self._connection() as connection, _transaction(connection):
            connection.execute(self._q("register_tasks"), {"tasks": _payload_json(rows)})

    def get_task(self, name: str) -> TaskDefinition | None:
        rows = self._fetch_dicts("get_task", {"name": name})
        return records.task_definition(rows[0], _to_json) if rows else None

    # --- runs -------------------------------------------------------------------

    def enqueue(self, runs: Sequence[NewRun]) -> None:
        if not runs:
            return
        payload = _enqueue_payload(runs)
        with self._connection() as connection, _transaction(connection):
            connection.execute(self._q("enqueue"), {"runs": payload})
            connection.execute(self._q("notify"))

    def cycle(
        self,
        worker_id: str,
        queues: Sequence[str],
        starts: Sequence[Fence],
        outcomes: Sequence[Outcome],
        claim_limit: int,
        lease_seconds: float,
    ) -> CycleResult:
        """Report, then claim, in one transaction of two pipelined batches.

        The first batch records starts and outcomes, asks for cancel requests
        and locks the claim candidates; the second claims them (and, when the
        claim ran dry, asks when the next run falls due) and commits.
        """
        queue_list = list(queues)
        reported, outcome_payload = _outcome_payload(outcomes)
        with self._connection() as connection:
            with _transaction(connection):
                applied = None
                if starts or outcomes:
                    applied = connection.execute(
                        self._q("cycle_reports"),
                        {**_start_arrays(starts), "outcomes": outcome_payload, "worker": worker_id},
                    )
                if outcomes:
                    connection.execute(self._q("notify"))  # finished runs may be waited on, and free capacity
                cancels = connection.execute(self._q("cancel_requests"), {"worker": worker_id})
                claim, due = None, None
                if claim_limit > 0:
                    claim, due = self._claim(connection, worker_id, queue_list, claim_limit, lease_seconds)
            applied_fences = set() if applied is None else {(row[0], row[1]) for row in applied.fetchall()}
            cancel_requested = [(row[0], row[1]) for row in cancels.fetchall()]
            claimed = [] if claim is None else [_claimed_run(row) for row in claim.fetchall()]
            next_due_in = None if due is None else due.fetchone()[0]  # type: ignore[index]
        fenced_out = [fence for fence in reported if fence not in applied_fences]
        return CycleResult(claimed, fenced_out, cancel_requested, next_due_in)

    def _claim(
        self,
        connection: psycopg.Connection[Any],
        worker_id: str,
        queues: list[str],
        limit: int,
        lease_seconds: float,
    ) -> tuple[psycopg.Cursor[Any] | None, psycopg.Cursor[Any] | None]:
        """Lock the candidates (this fetch ends the first batch), then queue the claim.

        Returns the cursors of the claim and of the next-due probe (None when
        not sent); their rows arrive with the commit.
        """
        candidates = [
            row[0]
            for row in connection.execute(
                self._q("claim_candidates"), {"queues": queues, "limit": limit}
            ).fetchall()
        ]
        claim = None
        if candidates:
            claim = connection.execute(
                self._q("claim_runs"), {"ids": candidates, "worker": worker_id, "lease": lease_seconds}
            )
        due = None
        if len(candidates) < limit:  # every locked candidate is claimed, so this is "ran dry"
            due = connection.execute(self._q("next_due"), {"queues": queues})
        return claim, due

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
            with _transaction(connection):
                back = connection.execute(
                    self._q("hand_back"),
                    {**_fence_arrays(held), "worker": worker_id, "reason": WORKER_SHUTTING_DOWN},
                )
                connection.execute(self._q("notify"))
            return [row[0] for row in back.fetchall()]

    def sweep(self, sweeper_id: str, interval: float) -> SweepReport | None:
        with self._connection() as connection, _transaction(connection):
            turn = connection.execute(
                self._q("take_lock"), {"name": SWEEPER_LOCK, "holder": sweeper_id, "ttl": 3 * interval}
            ).fetchone()
            if turn is None:
                return None
            report = SweepReport()
            for run_id, status in connection.execute(self._q("sweep_recover"), {"reason": LEASE_EXPIRED}).fetchall():
                (report.requeued if status == "queued" else report.failed).append(run_id)
            if report:
                connection.execute(self._q("notify"))
        return report

    def cancel_run(self, run_id: str) -> RunStatus:
        """Cancel if queued, else ask the running worker; one round trip.

        `request_cancel` runs after `cancel_queued` in the same transaction
        and so matches nothing once the run was canceled while queued.
        """
        params = {"id": run_id, "reason": CANCELED_WHILE_QUEUED}
        with self._connection() as connection:
            with _transaction(connection):
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

    # --- wake-ups ----------------------------------------------------------------

    def listen(self, callback: Callable[[], None]) -> NotifyListener:
        return NotifyListener(self.url, self._q("listen"), callback, connect_timeout=CONNECT_TIMEOUT)

    def close(self) -> None:
        self._pool.close()


# --- transactions ----------------------------------------------------------------


@contextmanager
def _transaction(connection: psycopg.Connection[Any]) -> Iterator[None]:
    """One transaction whose statements are pipelined: BEGIN ... COMMIT as plain statements.

    Statements are sent without waiting for one another; a fetch inside the
    block waits for everything sent before it (one round trip), and the
    COMMIT travels with whatever is still unsent when the block ends. Read
    the other cursors after the block, before the connection goes back to
    the pool. psycopg's `connection.transaction()` would sync the pipeline
    after BEGIN and again after COMMIT: two more round trips per verb.
    """
    try:
        with connection.pipeline():
            connection.execute(b"BEGIN")
            yield
            connection.execute(b"COMMIT")
    except BaseException:
        _roll_back(connection)
        raise


def _roll_back(connection: psycopg.Connection[Any]) -> None:
    """Leave no failed transaction behind; a broken connection is the pool's to discard."""
    if connection.closed or connection.info.transaction_status == TransactionStatus.IDLE:
        return
    try:
        connection.rollback()
    except psycopg.Error:
        pass


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
    text = _payload_json([_new_run_row(index, run) for index, run in enumerate(runs)])
    if _JSON_NUL in text:  # rare: only then look closer (the text may hold an escaped backslash)
        for run in runs:
            if _holds_nul([run.args, run.tags, run.concurrency_key]):
                raise InvalidArgument(
                    f"run {run.id}: args, tags or concurrency key contain the NUL character (\\u0000), "
                    "which PostgreSQL cannot store"
                )
    return text


def _new_run_row(index: int, run: NewRun) -> dict[str, Any]:
    return {
        "n": index,
        "id": run.id,
        "task": run.task,
        "queue": run.queue,
        "priority": run.priority,
        "args": run.args,
        "tags": run.tags,
        "concurrency_key": run.concurrency_key,
        "max_attempts": run.max_attempts,
        "retry_backoff": run.retry_backoff,
        "timeout": run.timeout,
        "delay": run.delay,
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
    """PostgreSQL refuses U+0000 in text and jsonb; without this one outcome would sink the whole cycle.

    In an error message it is replaced; a result that holds it cannot be
    stored faithfully, so the attempt ends failed and says why.
    """
    if _holds_nul(outcome.result):
        return Outcome(
            outcome.run_id,
            outcome.attempt,
            OutcomeKind.FAILED,
            error="InvalidResult: the result contains the NUL character (\\u0000), which PostgreSQL cannot store",
        )
    if outcome.error is None or "\x00" not in outcome.error:
        return outcome
    error = outcome.error.replace("\x00", "\\x00")
    return Outcome(outcome.run_id, outcome.attempt, outcome.kind, outcome.result, error, outcome.retry_delay)


def _holds_nul(value: Any) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_holds_nul(key) or _holds_nul(item) for key, item in value.items())
    if isinstance(value, (list, tuple)):
        return any(_holds_nul(item) for item in value)
    return False


def _claimed_run(row: tuple[Any, ...]) -> ClaimedRun:
    run_id, task, queue, args, attempt, max_attempts, retry_backoff, timeout = row
    return ClaimedRun(
        id=run_id,
        task=task,
        queue=queue,
        args=args,
        attempt=attempt,
        max_attempts=max_attempts,
        retry_backoff=retry_backoff,
        timeout=timeout,
    )


# --- errors ----------------------------------------------------------------------


def _describe(url: str) -> str:
    """host:port/dbname for messages, never the password."""
    try:
        params = conninfo_to_dict(url)
    except psycopg.ProgrammingError as error:
        raise ConfigurationError(f"invalid PostgreSQL URL: {_first_line(error)}") from None
    host = params.get("host") or "localhost"
    port = params.get("port") or "5432"
    return f"{host}:{port}/{params.get('dbname') or params.get('user') or ''}"


def _alive(connection: psycopg.Connection[Any]) -> bool:
    """Read what an idle connection received (libpq never blocks here): a hang-up shows as an error.

    A server that hangs up first sends its reason (e.g. FATAL: terminating
    connection), then closes; one read may take only the message, the next
    then meets the end of the stream.
    """
    if connection.closed or connection.broken:
        return False
    try:
        connection.pgconn.consume_input()
        connection.pgconn.consume_input()
    except psycopg.OperationalError:
        return False
    return connection.pgconn.status == ConnStatus.OK


def _connection_lost(error: psycopg.OperationalError) -> bool:
    """A broken or refused connection, as opposed to e.g. a deadlock or a canceled statement."""
    return error.sqlstate is None or error.sqlstate.startswith(("08", "57P"))


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__

