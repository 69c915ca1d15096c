"""PostgreSQL: what the fleet is doing, for operators: the worker registry and how fast runs end.

Read-only, and its own aggregate: `GET /api/v1/workers`, the ETA of `queue
why` and the admission hint read it; the claim path never does. Ages and windows are
measured on the server's clock (`tidegate_now()`), never this process's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import psycopg
from psycopg.rows import tuple_row

from tidegate.domain.backpressure import HISTORY_RUNS, RATE_WINDOW_SECONDS, Pace
from tidegate.domain.jsonvalue import dumps
from tidegate.domain.model import WorkerRecord
from tidegate.storage import port
from tidegate.storage.postgres.database import Aggregate, named_cursor
from tidegate.storage.postgres.payloads import to_json, to_time
from tidegate.storage.shared import records


class Activity(Aggregate, port.ActivityVerbs):
    """The fleet-reading verbs of the storage port."""

    def list_workers(self) -> list[WorkerRecord]:
        return [records.worker_record(row, to_time, to_json) for row in self._fetch_dicts("list_workers", {})]

    def finished_count(
        self,
        within: float,
        *,
        queue: str | None = None,
        partition: str | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> int:
        params = {"within": within, "queue": queue, "partition": partition, "tags": dumps(dict(tags or {}))}
        row = self._fetchone("finished_count", params)
        count: int = row[0] if row else 0  # count(*) always returns its one row
        return count

    def run_pace(
        self,
        within: float,
        *,
        queue: str | None = None,
        partition: str | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> Pace:
        with self._connection() as connection:
            return read_pace(connection, self._q, queue=queue, partition=partition, tags=tags, within=within)


def read_pace(
    connection: psycopg.Connection[Any],
    query: Callable[[str], str],
    *,
    queue: str | None,
    partition: str | None = None,
    tags: Mapping[str, str] | None = None,
    within: float = RATE_WINDOW_SECONDS,
) -> Pace:
    """`run_pace` on `connection`: also read by a refused submit, trigger or retry for its hint."""
    params = pace_params(queue=queue, partition=partition, tags=tags, within=within)
    row = named_cursor(connection, "run_pace", tuple_row).execute(query("run_pace"), params).fetchone()
    assert row is not None  # an aggregate always returns its one row
    return pace_of(row)


def pace_params(
    *,
    queue: str | None,
    partition: str | None = None,
    tags: Mapping[str, str] | None = None,
    within: float = RATE_WINDOW_SECONDS,
) -> dict[str, Any]:
    """`run_pace`'s parameters (also sent by a submit's script, storage/postgres/submit_script.py)."""
    return {
        "within": within,
        "queue": queue,
        "partition": partition,
        "tags": dumps(dict(tags or {})),
        "history": HISTORY_RUNS,
    }


def pace_of(row: Sequence[Any]) -> Pace:
    """A `run_pace` row as the domain's `Pace`."""
    ended, ended_seconds, running, running_seconds, earlier = row
    return Pace(ended, ended_seconds, running, running_seconds, earlier)
