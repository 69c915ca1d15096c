"""SQLite runs: task definitions, submits, cancels and the reads of runs, events and queues.

Admission ceilings (`max_active`) are counted in the submit's own
`BEGIN IMMEDIATE` transaction: SQLite's single writer is what keeps two
submitters from both taking the last place.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from tidegate.domain import events as history
from tidegate.domain.backpressure import HISTORY_RUNS, RATE_WINDOW_SECONDS
from tidegate.domain.errors import RunNotFound
from tidegate.domain.jsonvalue import dumps
from tidegate.domain.model import NewRun, TaskDefinition
from tidegate.domain.transitions import ceilings_met
from tidegate.storage import port
from tidegate.storage.shared import records
from tidegate.storage.shared.reads import RunReads
from tidegate.storage.sqlite.activity import pace_of
from tidegate.storage.sqlite.database import Aggregate, Database
from tidegate.storage.sqlite.limits import Limits
from tidegate.storage.sqlite.payloads import event_row


class Runs(Aggregate, RunReads, port.RunVerbs):
    """The run verbs of the storage port."""

    def __init__(self, db: Database, limits: Limits) -> None:
        super().__init__(db)
        self._limits = limits

    def register_tasks(self, tasks: Sequence[TaskDefinition], worker_id: str | None = None) -> None:
        rows = [_task_row(task, worker_id) for task in tasks]
        with self._write() as (connection, now):
            for row in rows:
                row["now"] = now
            connection.executemany(self._q("register_tasks"), rows)

    def enqueue(self, runs: Sequence[NewRun]) -> None:
        with self._write() as (connection, now):
            self.insert_runs(connection, runs, now)

    def insert_runs(self, connection: sqlite3.Connection, runs: Sequence[NewRun], now: float) -> None:
        """`enqueue` inside the caller's write transaction (a schedule's tick stores its run with its tick)."""
        rows = [
            {
                **records.new_run_row(run),
                "args": dumps(run.args),
                "tags": dumps(run.tags),
                "now": now,
                "keyed": run.unique is not None,  # Unique.admit takes the key of every keyed run it stores
            }
            for run in runs
        ]
        events = [event_row(run.id, history.run_queued(run.queue), now) for run in runs]
        self.check_admission(connection, [run.queue for run in runs], now)
        connection.executemany(self._q("enqueue"), rows)
        connection.executemany(self._q("insert_event"), events)

    def check_admission(self, connection: sqlite3.Connection, queues: Sequence[str], now: float) -> None:
        """Refuse runs of `queues` (one entry per run) if they would push active runs past a ceiling.

        Counted in the caller's write transaction: a submit, or an operator's retry
        (retries.py), which puts a run back among the active ones like a submit.
        """
        for ceiling in ceilings_met(self._limits.load_rules(connection), queues):
            active = connection.execute(self._q("enqueue_active"), {"queue": ceiling.queue}).fetchone()[0]
            if ceiling.refuses(active):
                params = {"now": now, "within": RATE_WINDOW_SECONDS, "queue": ceiling.queue, "partition": None}
                pace = connection.execute(self._q("run_pace"), {**params, "tags": "{}", "history": HISTORY_RUNS})
                raise ceiling.rejection(active, pace_of(pace.fetchone()))

    def pending_count(self, queues: Sequence[str]) -> int:
        connection = self._connection()
        return sum(connection.execute(self._q("pending_count"), {"queue": queue}).fetchone()[0] for queue in queues)

    def queue_position(self, run_id: str) -> tuple[int, int]:
        connection = self._connection()
        row = connection.execute(self._q("get_run"), {"id": run_id}).fetchone()
        if row is None:
            raise RunNotFound(f"no run with id {run_id!r}")
        ahead, total = connection.execute(
            self._q("queue_position"),
            {
                "queue": row["queue"],
                "resumed": row["resumed"],
                "priority": row["priority"],
                "scheduled_at": row["scheduled_at"],
                "id": run_id,
            },
        ).fetchone()
        return ahead + 1, total


def _task_row(task: TaskDefinition, worker_id: str | None) -> dict[str, object]:
    row = records.task_row(task, worker_id)
    return {
        **row,
        "tags": dumps(row["tags"]),
        "parameters": None if task.parameters is None else dumps(row["parameters"]),
        "unique_rule": None if task.unique is None else dumps(row["unique_rule"]),
    }
