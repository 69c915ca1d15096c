"""SQLite: what the fleet is doing, for operators: the worker registry and how fast runs end.

Read-only, and its own aggregate: `GET /api/v1/workers`, the ETA of `queue
why` and the admission hint read it; the claim path never does. Ages and windows are
measured on the store's clock (`Database.clock`), as every other time here.
"""

from __future__ import annotations

from collections.abc import Mapping

from tidegate.domain.backpressure import HISTORY_RUNS, Pace
from tidegate.domain.jsonvalue import dumps
from tidegate.domain.model import WorkerRecord
from tidegate.storage import port
from tidegate.storage.shared import records
from tidegate.storage.sqlite.database import Aggregate
from tidegate.storage.sqlite.payloads import to_json, to_time


class Activity(Aggregate, port.ActivityVerbs):
    """The fleet-reading verbs of the storage port."""

    def list_workers(self) -> list[WorkerRecord]:
        rows = self._connection().execute(self._q("list_workers"), {"now": self._db.clock.wall()})
        return [records.worker_record(row, to_time, to_json) for row in rows]

    def finished_count(
        self,
        within: float,
        *,
        queue: str | None = None,
        partition: str | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> int:
        params = self._scope_params(within, queue, partition, tags)
        count: int = self._connection().execute(self._q("finished_count"), params).fetchone()[0]
        return count

    def run_pace(
        self,
        within: float,
        *,
        queue: str | None = None,
        partition: str | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> Pace:
        params = {**self._scope_params(within, queue, partition, tags), "history": HISTORY_RUNS}
        row = self._connection().execute(self._q("run_pace"), params).fetchone()
        return pace_of(row)

    def _scope_params(
        self, within: float, queue: str | None, partition: str | None, tags: Mapping[str, str] | None
    ) -> dict[str, object]:
        """The runs of one scope that ended in the last `within` seconds, as the named queries take them."""
        return {
            "now": self._db.clock.wall(),
            "within": within,
            "queue": queue,
            "partition": partition,
            "tags": dumps(dict(tags or {})),
        }


def pace_of(row: tuple[int, float, int, float, float | None]) -> Pace:
    """The `run_pace` row (also read by a refused submit, storage/sqlite/runs.py) as a Pace."""
    ended, ended_seconds, running, running_seconds, earlier = row
    return Pace(
        ended, float(ended_seconds), running, float(running_seconds), None if earlier is None else float(earlier)
    )
