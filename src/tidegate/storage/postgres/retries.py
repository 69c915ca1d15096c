"""PostgreSQL: an operator's retry of a failed or canceled run (`POST /api/v1/runs/{id}/retry`).

Its own aggregate: the workers never call it, and its rule (which statuses
may be retried, the budget after) is `domain.transitions`, judged here on the
row locked `FOR UPDATE` until the update commits. A retried run is active
again, so it meets the admission ceilings (`max_active`) exactly as a submit
does: under the rules fence and each ceiling's lock (the submit's own, taken
in key order), READ COMMITTED, the count sees every submit and retry that
committed first, and `domain.transitions` decides; past a ceiling it raises
the submit's `AdmissionRejected`.
"""

from __future__ import annotations

from psycopg.rows import dict_row

from tidegate.domain import events as history
from tidegate.domain.errors import RunNotFound, RunNotRetryable
from tidegate.domain.model import RunRecord
from tidegate.domain.transitions import may_retry, retried_max_attempts
from tidegate.storage import port
from tidegate.storage.postgres.admission import refuse_past_ceilings
from tidegate.storage.postgres.database import Aggregate, Database
from tidegate.storage.postgres.limits import Limits
from tidegate.storage.postgres.payloads import event_params, to_json, to_time
from tidegate.storage.postgres.pipeline import transaction
from tidegate.storage.shared import records


class Retries(Aggregate, port.RetryVerbs):
    """The retry verb of the storage port."""

    def __init__(self, db: Database, limits: Limits) -> None:
        super().__init__(db)
        self._limits = limits  # the rules whose ceilings a retry meets

    def retry_run(self, run_id: str) -> RunRecord:
        with self._connection() as connection:
            with transaction(connection, b"BEGIN ISOLATION LEVEL READ COMMITTED"):
                connection.execute(self._q("enqueue_fence"))
                found = connection.execute(self._q("retry_run_lock"), {"id": run_id}).fetchone()
                if found is None:
                    raise RunNotFound(f"no run with id {run_id!r}")
                status, attempt, max_attempts, queue = found
                if not may_retry(status):
                    raise RunNotRetryable(f"run {run_id} is {status}: only a failed or canceled run can be retried")
                rules = self._limits.parse_rules(connection.execute(self._q("load_rules"), {"known": None}).fetchone())
                refuse_past_ceilings(connection, self._q, rules, [queue])
                budget = retried_max_attempts(max_attempts)
                params = {"id": run_id, "status": status, "max_attempts": budget}
                updated = connection.cursor(row_factory=dict_row).execute(self._q("retry_run"), params)
                event = history.retried_by_operator(status, attempt, budget)
                connection.execute(self._q("insert_event"), event_params(run_id, event))
            row = updated.fetchone()
        assert row is not None  # the row was locked with this status
        return records.run_record(row, to_time, to_json)
