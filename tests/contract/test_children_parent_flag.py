"""A claimed run says whether it has a parent, so that a cycle ending only parentless runs looks
for no parent to resume (issue 16: `resume_parents_lock` cost 0.19 ms of server time in every
no-limit cycle of 8 on PostgreSQL, although no run had a parent).

The flag travels from the claim (`ClaimedRun.has_parent`, both claim statements on PostgreSQL:
the one-statement claim and the general one) to the outcome the worker builds
(`worker.outcomes`), which the cycle reads. A child's end must still resume its parent however
it was claimed; a parentless cycle must send no resume statement. Both adapters.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest

from tidegate import RunStatus
from tidegate.domain.children import NewChild, TriggerRequest
from tidegate.domain.model import CycleRequest
from tidegate.worker import outcomes
from tidegate.worker.execution import Attempt

from .conftest import QUEUE, claim, completed, enqueue_one, new_run

KIDS = "kids"
MAX_PAYLOAD = 1 << 20


def _worker_outcome(run: Any) -> Any:
    """The outcome a worker reports when `run`'s body returns None."""
    return outcomes.for_value(Attempt(run, None, 0.0), None, MAX_PAYLOAD)


@pytest.mark.parametrize("claimed_by", ["one statement", "general claim"])
def test_a_child_ended_through_the_workers_outcome_resumes_its_parent(store, claimed_by):
    """The general claim is taken under a queue limit on the children's queue (PostgreSQL's
    one-statement claim serves only queues no limit applies to)."""
    if claimed_by == "general claim":
        store.set_limit(f"queue:{KIDS}", 5)
    enqueue_one(store)
    (parent,) = claim(store)
    assert not parent.has_parent
    child = NewChild(new_run(KIDS, task="t.child"), 0, True)
    assert store.trigger_children(TriggerRequest(parent.fence, "w1", [child], True, False)).waiting
    (kid,) = claim(store, "w2", queues=[KIDS])
    assert kid.has_parent
    ended = _worker_outcome(kid)
    assert ended.has_parent
    store.cycle(CycleRequest("w2", [KIDS], [kid.fence], [ended], 0, 30.0))
    assert store.get_run(parent.id).status is RunStatus.QUEUED


@contextmanager
def _resume_statements(store: Any, backend: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The resume statements the store sends meanwhile (by their text)."""
    sent: list[str] = []
    queries = store._queries
    if backend == "postgres":
        resumes = {queries["resume_parents"], queries["resume_parents_lock"]}
        real_execute = psycopg.Cursor.execute

        def execute(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
            if query in resumes:
                sent.append(query)
            return real_execute(self, query, *args, **kwargs)

        monkeypatch.setattr(psycopg.Cursor, "execute", execute)
        yield sent
        monkeypatch.undo()
        return
    # SQLite traces statements with their parameters bound: match a line of the resume without any.
    fragment = "<= max(coalesce(wait_remaining, 0), 0)"
    assert [name for name, text in queries.items() if fragment in text] == ["resume_parents"]
    connection = store._db.connection()  # this thread's: the one the cycle writes with
    connection.set_trace_callback(lambda statement: sent.append(statement) if fragment in statement else None)
    try:
        yield sent
    finally:
        connection.set_trace_callback(None)


def test_a_cycle_ending_only_parentless_runs_sends_no_resume(store, backend, monkeypatch):
    for _ in range(3):
        enqueue_one(store)
    runs = claim(store, "w1", limit=3)
    assert len(runs) == 3 and not any(run.has_parent for run in runs)
    ended = [_worker_outcome(run) for run in runs]
    with _resume_statements(store, backend, monkeypatch) as sent:
        store.cycle(CycleRequest("w1", [QUEUE], [run.fence for run in runs], ended, 0, 30.0))
    assert sent == []
    assert {store.get_run(run.id).status for run in runs} == {RunStatus.COMPLETED}
    # An outcome that does not say (built elsewhere: has_parent defaults to True) still looks.
    enqueue_one(store)
    (unknown,) = claim(store, "w1")
    with _resume_statements(store, backend, monkeypatch) as sent:
        store.cycle(CycleRequest("w1", [QUEUE], [unknown.fence], [completed(unknown.fence)], 0, 30.0))
    assert sent
