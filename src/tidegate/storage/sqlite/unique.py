"""SQLite: a keyed submit (once per key, domain/unique.py) in one write transaction.

`BEGIN IMMEDIATE` makes the submitter the only writer: the holders it reads stay the holders
until it commits. The domain's `plan` decides each run; the holders to replace are updated,
the new runs stored as `Runs.enqueue` stores them (admission included) and the keys taken.
A refusal, a `DuplicateRun` or any error rolls the whole batch back.

A single run whose key has no row yet (the usual first submit of a key) skips the read and
the plan: its insert of the key is the test (`unique_take_new`), one statement instead of two.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from tidegate.domain.jsonvalue import dumps
from tidegate.domain.model import NewRun
from tidegate.domain.unique import Admission, plan
from tidegate.storage import port
from tidegate.storage.shared.uniqueness import batch_keys, holders_of, key_rows, replace_params
from tidegate.storage.sqlite.database import Aggregate, Database
from tidegate.storage.sqlite.runs import Runs


class Unique(Aggregate, port.UniqueVerbs):
    """The keyed submit of the storage port."""

    def __init__(self, db: Database, runs: Runs) -> None:
        super().__init__(db)
        self._runs = runs

    def enqueue_unique(self, runs: Sequence[NewRun]) -> list[Admission]:
        with self._write() as (connection, now):
            return self.admit(connection, runs, now)

    def admit(self, connection: sqlite3.Connection, runs: Sequence[NewRun], now: float) -> list[Admission]:
        """`enqueue_unique` inside a write transaction the caller holds (its own, or a user's: submits.py)."""
        if len(runs) == 1 and runs[0].unique is not None:
            # The common single submit of a new key: one insert takes it (no holder to read, nothing
            # to plan: a key never taken is free for any rule); a key with a row goes the general way.
            [row] = key_rows(runs)
            if connection.execute(self._q("unique_take_new"), {**row, "now": now}).rowcount == 1:
                self._runs.insert_runs(connection, runs, now)
                return [Admission(runs[0].id)]
        held = connection.execute(self._q("unique_holders"), {"keys": dumps(batch_keys(runs)), "now": now})
        decided = plan(runs, holders_of(held.fetchall()))
        for holder_id, run in decided.replace:
            # read under the write lock: the holder is still queued, the update finds it
            params = {**replace_params(holder_id, run), "args": dumps(run.args), "now": now}
            connection.execute(self._q("unique_replace"), params).fetchall()
        if decided.store:
            self._runs.insert_runs(connection, decided.store, now)
            connection.executemany(self._q("unique_take"), [{**row, "now": now} for row in key_rows(decided.store)])
        return decided.answers
