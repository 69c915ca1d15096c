"""The storage port's submits from outside the store's own sync calls: async, and in the caller's transaction.

Kept beside `port.py` as a port of its own (`Store.submits`): both adapters implement it
over the same statements and decisions as `Store.enqueue` / `Store.enqueue_unique`
(PostgreSQL: the script of storage/postgres/submit_script.py; SQLite: the same aggregates'
methods inside the caller's write transaction), so no path stores runs by other rules.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from tidegate.domain.model import NewRun, RunRecord, RunStatus, TaskDefinition
from tidegate.domain.unique import Admission


class Submits(Protocol):
    def enqueue_in(self, connection: Any, runs: Sequence[NewRun]) -> list[Admission]:
        """`enqueue_unique`'s answers, written in `connection`'s open transaction (the caller's) and
        left for the caller to commit or roll back: ceilings and keys are judged in it, and
        workers are woken when it commits. A connection of the wrong kind, to another database,
        or with no transaction where one is needed raises `InvalidArgument`, nothing written."""

    async def enqueue_in_async(self, connection: Any, runs: Sequence[NewRun]) -> list[Admission]:
        """`enqueue_in` on the caller's async connection (PostgreSQL: a psycopg AsyncConnection)."""

    def shares_writer(self, connection: Any) -> bool:
        """Whether a write of the store's own now could wait for `connection`'s open transaction
        (SQLite has one writer; PostgreSQL locks rows, and tidegate's declarations are its own)."""

    async def enqueue_async(self, runs: Sequence[NewRun]) -> list[Admission]:
        """`enqueue_unique` from an event loop, in a transaction of the store's own."""

    async def get_run_async(self, run_id: str) -> RunRecord | None: ...

    async def get_task_async(self, name: str) -> TaskDefinition | None: ...

    async def cancel_run_async(self, run_id: str) -> RunStatus:
        """`cancel_run` from an event loop."""

    async def aclose(self) -> None:
        """Release what the calling event loop holds (its connection pool, on PostgreSQL)."""

    def close(self) -> None: ...
