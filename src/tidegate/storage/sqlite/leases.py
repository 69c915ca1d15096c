"""SQLite leases and the sweep: renewals, hand-backs, and recovery of what was lost.

What the sweep does is told in `storage/shared/rescue.py`. Here every step of it
reads its rows and writes them back with their events in the sweep's one
`BEGIN IMMEDIATE` transaction: SQLite's single writer means nothing else
changes them meanwhile.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from functools import partial
from typing import Any

from tidegate.domain import events as history
from tidegate.domain import transitions
from tidegate.domain.events import Event
from tidegate.domain.integers import STORED_INT_MAX
from tidegate.domain.model import SweepReport
from tidegate.storage import port
from tidegate.storage.port import Fence
from tidegate.storage.shared import rate_charges, rescue, wakes
from tidegate.storage.sqlite.children import Children
from tidegate.storage.sqlite.database import Aggregate, Database
from tidegate.storage.sqlite.payloads import event_row
from tidegate.storage.sqlite.steps import SQLiteStepVerbs

# What SQLite answers a verdict it will not write (a constraint, a trigger's RAISE, a value it
# cannot take): that run's verdict is isolated. OperationalError (locked, I/O) fails the sweep.
_REFUSED: tuple[type[Exception], ...] = (
    sqlite3.IntegrityError,
    sqlite3.DataError,
    sqlite3.InternalError,
    sqlite3.ProgrammingError,
    sqlite3.NotSupportedError,
    OverflowError,
)


class Leases(Aggregate, port.LeaseVerbs):
    """The lease and sweep verbs of the storage port."""

    def __init__(self, db: Database, steps: SQLiteStepVerbs, children: Children) -> None:
        super().__init__(db)
        self._steps = steps
        self._children = children

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
                self._q("renew_leases_holders"),
                {
                    "ids": json.dumps([fence[0] for fence in renewed]),
                    "worker": worker_id,
                    "now": now,
                    "lease": lease_seconds,
                },
            )
        # tuple(fence) of a (run id, attempt) row is a Fence
        return [tuple(fence) for fence in held if tuple(fence) not in renewed]  # type: ignore[misc]

    def hand_back(self, worker_id: str, held: Sequence[Fence]) -> list[str]:
        if not held:
            return []
        with self._write() as (connection, now):
            charges = connection.execute(
                self._q("hand_back_charges"), {"fences": json.dumps(held), "worker": worker_id}
            ).fetchall()
            rows = connection.execute(
                self._q("hand_back"),
                {
                    "fences": json.dumps(held),
                    "worker": worker_id,
                    "now": now,
                    "if_canceled": transitions.settle(transitions.QUEUED, cancel_requested=True),
                    "most_attempts": STORED_INT_MAX,
                },
            ).fetchall()
            connection.execute(self._q("release_holders"), {"ids": json.dumps([row[0] for row in rows])})
            rate_charges.give_back(self._rate_windows(connection, now), [stored for (stored,) in charges])
            events = [
                event_row(run_id, history.handed_back(status, attempt, worker_id, bool(suspect)), now)
                for run_id, attempt, status, suspect in rows
            ]
            connection.executemany(self._q("insert_event"), events)
        return [row[0] for row in rows]

    def report_cost(self, worker_id: str, fence: Fence, cost: int) -> bool:
        run_id, attempt = fence
        with self._write() as (connection, now):
            row = connection.execute(
                self._q("report_cost_charge"), {"id": run_id, "attempt": attempt, "worker": worker_id}
            ).fetchone()
            if row is None:
                wakes.only_if(False)
                return False
            charge = rate_charges.correct_charge(self._rate_windows(connection, now), row[0], cost)
            connection.execute(self._q("report_cost_write"), {"id": run_id, "attempt": attempt, "charge": charge})
        return True

    def sweep(self, sweeper_id: str, interval: float) -> SweepReport | None:
        with self._write() as (connection, now):
            taken = connection.execute(
                self._q("take_lock"),
                {"name": rescue.SWEEPER_LOCK, "holder": sweeper_id, "now": now, "ttl": 3 * interval},
            ).fetchone()
            if taken is None:
                wakes.only_if(False)
                return None
            verdicts = rescue.payload(rescue.decide(connection.execute(self._q("sweep_lost"), {"now": now}).fetchall()))
            recover = partial(self._recover, connection, now)
            recovered, unapplied = rescue.write_isolated(verdicts, recover, _REFUSED)
            if recovered:
                connection.execute(self._q("release_holders"), {"ids": json.dumps(list(recovered))})
            connection.execute(self._q("forget_dead_workers"), {"now": now})
            events = self._repair_leaks(connection, now)
            expired_slots, step_events = self._steps.sweep_step_holders(connection, now)
            report = SweepReport(leaks_repaired=len(events), step_slots_expired=expired_slots)
            events += step_events
            events += self._fail_missed_deadlines(connection, report, now)
            # Backstop: a waiting parent whose children all ended (by this sweep, or any path) resumes.
            report.resumed.extend(self._children.resume_parents(connection, None, events, now))
            rescue.add_to_report(report, recovered)
            report.unapplied.update(unapplied)
            events += [
                event_row(verdict["id"], Event(verdict["event"], verdict["metadata"]), now)
                for verdict in verdicts
                if verdict["id"] in recovered
            ]
            connection.executemany(self._q("insert_event"), events)
        wakes.only_if(report)
        return report

    def _recover(self, connection: sqlite3.Connection, now: float, verdicts: list[dict[str, Any]]) -> dict[str, str]:
        """`verdicts` written in a savepoint of the sweep's transaction, rolled back to it alone if refused."""
        connection.execute("SAVEPOINT sweep_recover")
        try:
            written = connection.execute(self._q("sweep_recover"), {"verdicts": json.dumps(verdicts), "now": now})
            recovered = dict(written.fetchall())
        except _REFUSED:
            connection.execute("ROLLBACK TO SAVEPOINT sweep_recover")
            raise
        finally:
            connection.execute("RELEASE SAVEPOINT sweep_recover")
        return recovered

    def _fail_missed_deadlines(
        self, connection: sqlite3.Connection, report: SweepReport, now: float
    ) -> list[dict[str, Any]]:
        events = []
        for row in connection.execute(self._q("sweep_deadlines"), {"now": now}).fetchall():
            error = transitions.deadline_error(now - row["submitted_at"])
            failed = connection.execute(
                self._q("sweep_deadlines_fail"), {"id": row["id"], "now": now, "error": error}
            ).fetchone()
            if failed is not None:
                report.failed.append(row["id"])
                events.append(event_row(row["id"], history.deadline_missed(failed["attempt"], error), now))
        return events

    def _repair_leaks(self, connection: sqlite3.Connection, now: float) -> list[dict[str, Any]]:
        """Delete holders whose run no longer runs that attempt; one SlotLeakRepaired event each."""
        events = []
        for row in connection.execute(self._q("sweep_leaks")).fetchall():
            connection.execute(self._q("sweep_leaks_delete"), {"scope": row["scope"], "holder": row["holder"]})
            repaired = history.slot_leak_repaired(row["scope"], row["slots"], row["attempt"])
            events.append(event_row(row["run_id"], repaired, now))
        return events
