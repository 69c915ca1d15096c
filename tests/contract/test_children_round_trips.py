"""What a trigger costs the store: a parent's wait is two round trips on PostgreSQL, and on
SQLite it reads nothing twice (issue 13's benchmark: a trigger held its parent's slot ~39 ms).

PostgreSQL pipelines a trigger: statements are sent without waiting, and a
round trip is paid where the code fetches a result that depends on statements
sent since its last wait, and at the commit. The count below is that, as the
code sees it (`TripCounter`).
A root's wait that keeps no slot while no waiting run keeps one reads
everything it decides on in the first trip and writes and commits in the
second. SQLite has no round trips; there, a root's wait reads the parent's
children once, and reads no chain above it (it has none).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest

from tidegate.domain.children import NewChild, TriggerRequest

from .conftest import claim, enqueue_one, new_run

KIDS = "kids"


class TripCounter:
    """Counts the waits for answers: a fetch of a statement sent since the last wait (every
    statement sent by then is answered in that trip, pipelined), and the commit at the end."""

    def __init__(self) -> None:
        self.trips = 0
        self.sent = 0  # statements sent so far
        self.answered = 0  # statements whose answers a trip has waited for
        self.last_sent: dict[int, int] = {}  # id of a cursor -> its last statement's number (cursors have slots)

    def executed(self, cursor: Any, statement: Any) -> None:
        self.sent += 1
        self.last_sent[id(cursor)] = self.sent
        if isinstance(statement, bytes) and statement.strip().upper() == b"COMMIT":
            self.wait()  # the end of the block waits for the commit's answer

    def fetched(self, cursor: Any) -> None:
        if self.last_sent.get(id(cursor), 0) > self.answered:
            self.wait()

    def wait(self) -> None:
        self.trips += 1
        self.answered = self.sent


@contextmanager
def counted_trips(monkeypatch: pytest.MonkeyPatch) -> Iterator[TripCounter]:
    counter = TripCounter()
    caller = threading.get_ident()  # the code counted runs on the test's thread
    real_execute = psycopg.Cursor.execute

    def execute(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        if threading.get_ident() == caller:  # not a background thread's statement (a listener, the pool)
            counter.executed(self, query)
        return real_execute(self, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.Cursor, "execute", execute)
    for name in ("fetchone", "fetchall", "fetchmany"):
        real = getattr(psycopg.Cursor, name)

        def fetch(self: Any, *args: Any, _real: Any = real, **kwargs: Any) -> Any:
            if threading.get_ident() == caller:
                counter.fetched(self)
            return _real(self, *args, **kwargs)

        monkeypatch.setattr(psycopg.Cursor, name, fetch)
    yield counter
    monkeypatch.undo()


def _children() -> list[NewChild]:
    return [NewChild(new_run(KIDS, task="t.child", args={"i": i}), i, True) for i in range(5)]


def test_a_roots_wait_costs_two_round_trips_on_postgresql(store, backend, monkeypatch):
    if backend != "postgres":
        pytest.skip("round trips are PostgreSQL's; SQLite's cost is below")
    enqueue_one(store)
    (parent,) = claim(store)
    with counted_trips(monkeypatch) as counter:
        answer = store.trigger_children(TriggerRequest(parent.fence, "w1", _children(), True, False))
    assert answer.waiting and len(answer.children) == 5
    assert counter.trips == 2


def test_a_fire_and_forget_trigger_costs_two_round_trips_on_postgresql(store, backend, monkeypatch):
    if backend != "postgres":
        pytest.skip("round trips are PostgreSQL's")
    enqueue_one(store)
    (parent,) = claim(store)
    with counted_trips(monkeypatch) as counter:
        answer = store.trigger_children(TriggerRequest(parent.fence, "w1", _children(), False, False))
    assert not answer.waiting
    assert counter.trips == 2


def test_a_roots_wait_reads_its_children_once_and_no_chain_on_sqlite(store, backend):
    if backend != "sqlite":
        pytest.skip("statements are SQLite's cost; PostgreSQL's round trips are above")
    enqueue_one(store)
    (parent,) = claim(store)
    statements: list[str] = []
    connection = store._db.connection()  # this thread's: the one the trigger writes with
    connection.set_trace_callback(statements.append)
    try:
        answer = store.trigger_children(TriggerRequest(parent.fence, "w1", _children(), True, False))
    finally:
        connection.set_trace_callback(None)
    assert answer.waiting and len(answer.children) == 5
    reads_of_children = [s for s in statements if "FROM tidegate_runs" in s and "WHERE parent_id =" in s]
    assert len(reads_of_children) == 1
    assert not [s for s in statements if "WITH RECURSIVE up" in s]
