"""PostgreSQL runs: task definitions, submits, cancels and the reads of runs, events and queues.

Admission ceilings (`max_active`) are checked in the submit's own
transaction, still one round trip: the batch takes one advisory lock per
ceiling it meets, in key order, and only the next statement counts the
active runs and inserts (or inserts nothing), so two submitters can never
both take the last place. Such a submit is four statements in one implicit
transaction (pipeline.implicit_transaction): the fence, the ceilings in force,
the locks, and the count with the insert.

Most batches meet no ceiling: for them a submit is one statement,
`enqueue_free` (free_submit.py), which stores the batch only while the rules
version is the one under which this store last read that no ceiling applies
to it (ceilings.py); a ceiling set since then moved the version, so the
statement stores nothing and the submit is made again the full way. It reads
the version row FOR SHARE instead of taking the rules fence first: the
locking read sees the newest committed version whatever its snapshot, and
holds the version still until it commits, with no second statement (runs.sql).
"""

from __future__ import annotations

from collections.abc import Sequence

from tidegate.domain.errors import RunNotFound
from tidegate.domain.model import NewRun, TaskDefinition
from tidegate.domain.transitions import Ceiling
from tidegate.storage import port
from tidegate.storage.postgres.activity import read_pace
from tidegate.storage.postgres.database import Aggregate
from tidegate.storage.postgres.free_submit import free_answers, free_steps, free_version
from tidegate.storage.postgres.payloads import enqueue_payload, payload_json
from tidegate.storage.postgres.pipeline import implicit_transaction, transaction
from tidegate.storage.postgres.script_runner import run_batch
from tidegate.storage.shared import records, wakes
from tidegate.storage.shared.reads import RunReads


class Runs(Aggregate, RunReads, port.RunVerbs):
    """The run verbs of the storage port."""

    def register_tasks(self, tasks: Sequence[TaskDefinition], worker_id: str | None = None) -> None:
        if not tasks:
            return
        latest = {task.name: task for task in tasks}  # an upsert may touch a row only once
        rows = [records.task_row(task, worker_id) for task in latest.values()]
        with self._connection() as connection, transaction(connection):
            connection.execute(self._q("register_tasks"), {"tasks": payload_json(rows)})

    def enqueue(self, runs: Sequence[NewRun]) -> None:
        if not runs:
            return
        wakes.sent_in_statement()  # by `enqueue_free` or `enqueue`, even when refused: a spare one at worst
        with self._connection() as connection:
            steps = free_steps(runs, free_version(self._db, runs, connection))
            if steps is not None and free_answers(runs, run_batch(connection, self._q, steps)[-1]) is not None:
                return
            # The rules moved since the ceilings were read, or a ceiling applies: the full way.
            payload = enqueue_payload(runs)
            # Four statements, one implicit READ COMMITTED transaction (the count must see every
            # submit committed before the ceiling's lock was granted), one round trip. The fence
            # and the locks are statements of their own: each later statement reads a snapshot
            # taken after they were granted. `enqueue` also sends the wake-up.
            with implicit_transaction(connection):
                connection.execute(self._q("enqueue_fence"))
                ceilings = connection.execute(self._q("enqueue_ceilings"))
                connection.execute(self._q("enqueue_lock"), {"queues": sorted({run.queue for run in runs})})
                refused = connection.execute(self._q("enqueue"), {"runs": payload})
            self._db.ceilings.read(ceilings.fetchone())
            row = refused.fetchone()
            if row is not None:  # nothing was stored; the hint goes by the pace of the ceiling's runs
                queue, active, limit, incoming = row
                raise Ceiling(queue, limit, incoming).rejection(active, read_pace(connection, self._q, queue=queue))

    def pending_count(self, queues: Sequence[str]) -> int:
        row = self._fetchone("pending_count", {"queues": list(queues)})
        count: int = row[0] if row else 0  # count(*) always returns its one row
        return count

    def queue_position(self, run_id: str) -> tuple[int, int]:
        row = self._fetchone("queue_position", {"id": run_id})
        if row is None:
            raise RunNotFound(f"no run with id {run_id!r}")
        ahead, total = row
        return ahead + 1, total
