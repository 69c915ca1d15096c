"""PostgreSQL leases and the sweep: renewals, hand-backs, and recovery of what was lost.

What the sweep does is told in `storage/shared/rescue.py`. Here it is one pipelined
transaction of set-based statements that write their own events; rows some
other transaction holds are skipped (SKIP LOCKED), not waited on, and swept
the next time.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from functools import partial
from typing import Any

import psycopg
from psycopg.rows import dict_row

from tidegate.domain import events as history
from tidegate.domain.integers import STORED_INT_MAX
from tidegate.domain.model import SweepReport
from tidegate.storage import port
from tidegate.storage.port import Fence
from tidegate.storage.postgres.children import Children
from tidegate.storage.postgres.database import Aggregate, Database
from tidegate.storage.postgres.payloads import fence_arrays, payload_json
from tidegate.storage.postgres.pipeline import transaction
from tidegate.storage.postgres.steps import PostgresStepVerbs
from tidegate.storage.shared import rate_charges, rescue, wakes

# What the database answers a verdict it will not write (a value out of range, a constraint, a
# trigger's refusal): that run's verdict is isolated. A lost connection, a deadlock or a timeout
# (OperationalError) fails the whole sweep instead, to be run again at the next pass.
_REFUSED: tuple[type[Exception], ...] = (
    psycopg.DataError,
    psycopg.IntegrityError,
    psycopg.InternalError,
    psycopg.ProgrammingError,
    psycopg.NotSupportedError,
)


RENEWAL_DEADLOCK_TRIES = 3  # sends of one renewal the server keeps choosing as a deadlock's victim

log = logging.getLogger(__name__)


class Leases(Aggregate, port.LeaseVerbs):
    """The lease and sweep verbs of the storage port."""

    def __init__(self, db: Database, steps: PostgresStepVerbs, children: Children) -> None:
        super().__init__(db)
        self._steps = steps
        self._children = children

    def renew_leases(self, worker_id: str, held: Sequence[Fence], lease_seconds: float) -> list[Fence]:
        """Renew `held`; the attempts not renewed (no longer this worker's) are returned.

        One statement, its own transaction: when the server picks it as a deadlock's victim
        (40P01, seen after a server crash) nothing of it was applied, and sending it again renews
        the same leases from the server's clock. It is sent again at once, up to
        `RENEWAL_DEADLOCK_TRIES` times, rather than at the worker's next turn a third of a lease
        later, while its attempts' watchdog counts down."""
        if not held:
            return []
        params = {**fence_arrays(held), "worker": worker_id, "lease": lease_seconds}
        for tries_left in reversed(range(RENEWAL_DEADLOCK_TRIES)):
            try:
                with self._connection() as connection:  # one statement: its own transaction
                    renewed = {(row[0], row[1]) for row in connection.execute(self._q("renew_leases"), params)}
                break
            except psycopg.errors.DeadlockDetected:
                if not tries_left:
                    raise
                log.warning("lease renewal of worker %s was a deadlock's victim: sent again", worker_id)
        return [(run_id, attempt) for run_id, attempt in held if (run_id, attempt) not in renewed]

    def hand_back(self, worker_id: str, held: Sequence[Fence]) -> list[str]:
        if not held:
            return []
        with self._connection() as connection:
            with transaction(connection):
                back = connection.execute(
                    self._q("hand_back"),
                    {
                        **fence_arrays(held),
                        "worker": worker_id,
                        "reason": history.WORKER_SHUTTING_DOWN,
                        "most_attempts": STORED_INT_MAX,
                    },
                )
                rows = back.fetchall()
                rate_charges.give_back(self._windows(connection), [stored for _, stored in rows])
            return [row[0] for row in rows]

    def report_cost(self, worker_id: str, fence: Fence, cost: int) -> bool:
        run_id, attempt = fence
        with self._connection() as connection, transaction(connection):
            row = connection.execute(
                self._q("report_cost_charge"), {"id": run_id, "attempt": attempt, "worker": worker_id}
            ).fetchone()
            if row is None:
                wakes.only_if(False)
                return False
            charge = rate_charges.correct_charge(self._windows(connection), row[0], cost)
            connection.execute(self._q("report_cost_write"), {"id": run_id, "attempt": attempt, "charge": charge})
        return True

    def _windows(self, connection: psycopg.Connection[Any]) -> rate_charges.Windows:
        """The rate windows' states in `connection`'s transaction, judged at the database's time."""
        return rate_charges.Windows(partial(self._states, connection), partial(self._write_states, connection))

    def _states(
        self, connection: psycopg.Connection[Any], keys: list[rate_charges.Key]
    ) -> tuple[dict[rate_charges.Key, int], float]:
        """The windows' states, locked in key order (as a claim locks them), and the database's time."""
        if not keys:
            return {}, 0.0
        found = connection.execute(
            self._q("rate_states"), {"scopes": [scope for scope, _ in keys], "windows": [window for _, window in keys]}
        ).fetchall()
        return {(scope, window): tat for _, scope, window, tat in found if scope is not None}, found[0][0]

    def _write_states(self, connection: psycopg.Connection[Any], states: dict[rate_charges.Key, int]) -> None:
        if states:
            keys = sorted(states)
            connection.execute(
                self._q("rate_states_write"),
                {
                    "scopes": [scope for scope, _ in keys],
                    "windows": [window for _, window in keys],
                    "tats": [states[key] for key in keys],
                },
            )

    def sweep(self, sweeper_id: str, interval: float) -> SweepReport | None:
        with self._connection() as connection, transaction(connection):
            taken = connection.execute(
                self._q("take_lock"), {"name": rescue.SWEEPER_LOCK, "holder": sweeper_id, "ttl": 3 * interval}
            ).fetchone()
            if taken is None:
                wakes.only_if(False)
                return None
            lost = connection.cursor(row_factory=dict_row).execute(self._q("sweep_lost")).fetchall()
            verdicts = rescue.payload(rescue.decide(lost))
            recovered, unapplied = rescue.write_isolated(verdicts, partial(self._recover, connection), _REFUSED)
            connection.execute(self._q("forget_dead_workers"))
            leaks = connection.execute(self._q("sweep_leaks"))
            expired_steps = self._steps.sweep_step_holders(connection)
            late = connection.execute(self._q("sweep_deadlines"))
            # Backstop: a waiting parent whose children all ended (by this sweep, or any path) resumes.
            resumed = self._children.resume_parents(connection, None)
            report = SweepReport(
                # fetchone() is typed Optional; this statement always returns one row
                leaks_repaired=leaks.fetchone()[0],  # type: ignore[index]
                # fetchone() is typed Optional; this statement always returns one row
                step_slots_expired=expired_steps.fetchone()[0],  # type: ignore[index]
            )
            report.failed.extend(row[0] for row in late.fetchall())
            report.resumed.extend(row[0] for row in resumed.fetchall())
            rescue.add_to_report(report, recovered)
            report.unapplied.update(unapplied)
            wakes.only_if(report)  # freed slots and requeued runs: claim again now
        return report

    def _recover(self, connection: psycopg.Connection[Any], verdicts: list[dict[str, Any]]) -> dict[str, str]:
        """`verdicts` written in a savepoint of the sweep's transaction, synced at once (the inner
        pipeline), so that a refusal surfaces here and is rolled back to the savepoint alone."""
        connection.execute(b"SAVEPOINT sweep_recover")
        try:
            with connection.pipeline():
                written = connection.execute(self._q("sweep_recover"), {"verdicts": payload_json(verdicts)})
        except _REFUSED:
            connection.execute(b"ROLLBACK TO SAVEPOINT sweep_recover")
            raise
        connection.execute(b"RELEASE SAVEPOINT sweep_recover")
        return dict(written.fetchall())
