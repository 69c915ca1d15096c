"""SQLite: an operator's retry of a failed or canceled run (`POST /api/v1/runs/{id}/retry`).

Its own aggregate: the workers never call it, and its rule (which statuses
may be retried, the budget after) is `domain.transitions`, judged here on the
row read under the write lock. A retried run is active again, so it meets the
admission ceilings (`max_active`) exactly as a submit does, in the same
transaction: past one it raises the submit's `AdmissionRejected`.
"""

from __future__ import annotations

from tidegate.domain import events as history
from tidegate.domain.errors import RunNotFound, RunNotRetryable
from tidegate.domain.model import RunRecord
from tidegate.domain.transitions import may_retry, retried_max_attempts
from tidegate.storage import port
from tidegate.storage.shared import records
from tidegate.storage.sqlite.database import Aggregate, Database
from tidegate.storage.sqlite.payloads import event_row, to_json, to_time
from tidegate.storage.sqlite.runs import Runs


class Retries(Aggregate, port.RetryVerbs):
    """The retry verb of the storage port."""

    def __init__(self, db: Database, runs: Runs) -> None:
        super().__init__(db)
        self._runs = runs  # whose admission check a retry passes, as a submit does

    def retry_run(self, run_id: str) -> RunRecord:
        with self._write() as (connection, now):
            found = connection.execute(self._q("retry_run_lock"), {"id": run_id}).fetchone()
            if found is None:
                raise RunNotFound(f"no run with id {run_id!r}")
            status, attempt, max_attempts, queue = found
            if not may_retry(status):
                raise RunNotRetryable(f"run {run_id} is {status}: only a failed or canceled run can be retried")
            self._runs.check_admission(connection, [queue], now)
            budget = retried_max_attempts(max_attempts)
            params = {"id": run_id, "status": status, "max_attempts": budget, "now": now}
            row = connection.execute(self._q("retry_run"), params).fetchone()
            event = history.retried_by_operator(status, attempt, budget)
            connection.execute(self._q("insert_event"), event_row(run_id, event, now))
        return records.run_record(row, to_time, to_json)
