"""The run transitions of domain/transitions.py, as both stores apply them (issue 11).

PostgreSQL applies them inside set-based statements (`cycle_reports`,
`hand_back`, `enqueue`, `sweep_deadlines`, `next_map_item`), SQLite with the
domain functions: each test drives the Store port on generated cases and
requires the rows and events the domain functions give, so a statement that
drifts from the rule fails here on its backend.
"""

from __future__ import annotations

import itertools
import uuid
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidegate.bootstrap import open_store
from tidegate.domain import events as history
from tidegate.domain import transitions
from tidegate.domain.backpressure import Pace
from tidegate.domain.errors import AdmissionRejected
from tidegate.domain.limits import QueueConfig, RunQueueConfig
from tidegate.domain.model import CycleRequest, NewRun, Outcome, OutcomeKind, RunStatus
from tidegate.domain.steps import StepStatus, StepUpdate
from tidegate.storage.shared.sqlfile import load_queries

from .conftest import LEASE, new_run

EXAMPLES = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
_names = itertools.count()


def new_runs(queue: str, count: int) -> list[NewRun]:
    return [new_run(queue, max_attempts=3) for _ in range(count)]


def running(store: Any, count: int, worker: str = "w-pinned") -> tuple[str, list[tuple[str, int]]]:
    """`count` runs of a fresh queue, claimed by `worker`: (queue, their fences)."""
    queue = f"pinned{next(_names)}"
    store.enqueue(new_runs(queue, count))
    claimed = store.cycle(CycleRequest(worker, [queue], [], [], count, LEASE)).claimed
    assert len(claimed) == count
    return queue, [run.fence for run in claimed]


def last_event(store: Any, run_id: str) -> history.Event:
    event = store.run_events(run_id)[-1]
    return history.Event(event.type, event.metadata)


outcomes = st.one_of(
    st.tuples(st.just(OutcomeKind.COMPLETED), st.none(), st.none()),
    st.tuples(st.just(OutcomeKind.CANCELED), st.just("canceled"), st.none()),
    st.tuples(
        st.just(OutcomeKind.FAILED),
        st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=20),
        st.one_of(st.none(), st.floats(0.0, 100.0)),
    ),
    st.tuples(st.just(OutcomeKind.SNOOZED), st.none(), st.floats(0.0, 100.0)),
)


@EXAMPLES
@given(cases=st.lists(st.tuples(outcomes, st.booleans()), min_size=1, max_size=5))
def test_an_outcome_takes_the_settled_status_and_its_event(store, cases):
    """outcome_status, then settle (a requested cancel wins over a retry, a snooze or a failure),
    then attempt_ended for the status taken: `cycle_reports` on PostgreSQL, SQLite's outcome rows.
    A snooze that took the queue grows the budget by one and counts itself; a canceled one does not."""
    queue, fences = running(store, len(cases))
    for (run_id, _), (_, cancel) in zip(fences, cases, strict=True):
        if cancel:
            assert store.cancel_run(run_id) is RunStatus.RUNNING
    reports = [
        Outcome(run_id, attempt, kind, error=error, retry_delay=delay)
        for (run_id, attempt), ((kind, error, delay), _) in zip(fences, cases, strict=True)
    ]
    assert store.cycle(CycleRequest("w-pinned", [queue], [], reports, 0, LEASE)).fenced_out == []
    for report, (_, cancel) in zip(reports, cases, strict=True):
        status = transitions.settle(transitions.outcome_status(report.kind.value, report.retry_delay), cancel)
        run = store.get_run(report.run_id)
        assert run.status.value == status
        assert (run.finished_at is None) == (status == transitions.QUEUED)
        assert run.worker_id is None and not run.cancel_requested
        snoozed = report.kind is OutcomeKind.SNOOZED
        counted = snoozed and status == transitions.QUEUED
        assert (run.snoozes, run.max_attempts) == (int(counted), 3 + counted)
        expected = history.attempt_ended(status, report.attempt, report.error, report.retry_delay, snoozed)
        assert last_event(store, report.run_id) == expected


@EXAMPLES
@given(cancels=st.lists(st.booleans(), min_size=1, max_size=5))
def test_a_hand_back_requeues_unless_a_cancel_was_asked(store, cancels):
    """settle(queued, cancel) and handed_back: `hand_back` on PostgreSQL, SQLite's hand-back rows."""
    _, fences = running(store, len(cancels))
    for (run_id, _), cancel in zip(fences, cancels, strict=True):
        if cancel:
            store.cancel_run(run_id)
    assert sorted(store.hand_back("w-pinned", fences)) == sorted(run_id for run_id, _ in fences)
    for (run_id, attempt), cancel in zip(fences, cancels, strict=True):
        status = transitions.settle(transitions.QUEUED, cancel)
        assert store.get_run(run_id).status.value == status
        assert last_event(store, run_id) == history.handed_back(status, attempt, "w-pinned", False)


@EXAMPLES
@given(
    everywhere=st.one_of(st.none(), st.integers(0, 4)),
    per_queue=st.tuples(st.one_of(st.none(), st.integers(1, 3)), st.one_of(st.none(), st.integers(1, 3))),
    waiting=st.tuples(st.integers(0, 3), st.integers(0, 3)),
    batch=st.lists(st.sampled_from([0, 1]), min_size=1, max_size=5),
)
def test_a_submit_is_refused_by_the_first_ceiling_it_would_pass(store, everywhere, per_queue, waiting, batch):
    """ceilings_met and Ceiling.refuses/rejection: the `enqueue` CTE on PostgreSQL, SQLite's checks.

    Queues are fresh per example; the all-queues ceiling is set relative to the
    runs already active in the store, so examples do not depend on each other."""
    queues = [f"ceil{next(_names)}", f"ceil{next(_names)}"]
    for queue, count in zip(queues, waiting, strict=True):
        store.enqueue(new_runs(queue, count))
    active = dict(zip(queues, waiting, strict=True))
    counts = store.status_counts()
    total = counts[RunStatus.QUEUED] + counts[RunStatus.RUNNING]
    run_queue = RunQueueConfig(max_active=None if everywhere is None else max(1, total + everywhere))
    store.register_limits(
        run_queue, [QueueConfig(queue, max_active=limit) for queue, limit in zip(queues, per_queue, strict=True)], []
    )
    try:
        submitted = [queues[index] for index in batch]
        expected = next(
            (
                ceiling
                for ceiling in transitions.ceilings_met(store.rules(), submitted)
                if ceiling.refuses(total if ceiling.queue is None else active[ceiling.queue])
            ),
            None,
        )
        try:
            store.enqueue([run for queue in submitted for run in new_runs(queue, 1)])
        except AdmissionRejected as refused:
            assert expected is not None, refused
            want = expected.rejection(total if expected.queue is None else active[expected.queue], Pace())
            assert (refused.scope, refused.active, refused.limit) == (want.scope, want.active, want.limit)
        else:
            assert expected is None
    finally:
        store.register_limits(RunQueueConfig(), [], [])


@EXAMPLES
@given(window=st.integers(1, 4), items=st.integers(0, 6))
def test_a_fan_out_window_takes_items_while_it_has_room(store, window, items):
    """has_room(used, window): `next_map_item` on PostgreSQL, SQLite's window check."""
    _, [fence] = running(store, 1)
    store.record_steps(
        fence, [StepUpdate(f"m[{index}]", StepStatus.PENDING, map_key="m", item_index=index) for index in range(items)]
    )
    taken = 0
    while (item := store.next_map_item(fence, "w-pinned", "m", window)) is not None:
        assert item.item_index == taken
        taken += 1
    assert all(transitions.has_room(used, window) for used in range(taken))
    assert taken == items or not transitions.has_room(taken, window)


@pytest.fixture
def migrated_postgres(postgres_url: str) -> str:
    open_store(postgres_url).close()
    return postgres_url


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(waits=st.lists(st.integers(0, 10**9), min_size=1, max_size=6))
def test_postgres_dispatch_deadline_text_is_the_domain_text(migrated_postgres, waits):
    """`sweep_deadlines` writes deadline_error of the time waited (in microseconds, as stored) and
    deadline_missed as its event. Rows are written and swept in one transaction, so now() is the
    same for both and the time waited is exact."""
    ids = [f"late{next(_names)}-{uuid.uuid4().hex[:6]}" for _ in waits]
    with psycopg.connect(migrated_postgres, autocommit=True) as connection, connection.transaction():
        for run_id, micros in zip(ids, waits, strict=True):
            connection.execute(
                "INSERT INTO tidegate_runs (id, task, queue, partition_key, status, priority, args, tags, attempt,"
                " max_attempts, retry_backoff, submitted_at, queued_at, scheduled_at, deadline_at)"
                " VALUES (%s, 't', 'late', '', 'queued', 0, '{}', '{}', 0, 1, 1.0,"
                " now() - make_interval(secs => %s::bigint / 1e6), now(), now(), now())",
                (run_id, micros),
            )
        failed = {row[0] for row in connection.execute(load_queries("tidegate.storage.postgres")["sweep_deadlines"])}
        rows = connection.execute(
            "SELECT r.id, r.error, e.type, e.metadata FROM tidegate_runs AS r JOIN tidegate_event_log AS e"
            " ON e.run_id = r.id WHERE r.id = ANY(%s)",
            (ids,),
        ).fetchall()
    assert failed >= set(ids)
    found = {run_id: (error, history.Event(kind, metadata)) for run_id, error, kind, metadata in rows}
    for run_id, micros in zip(ids, waits, strict=True):
        error = transitions.deadline_error(micros / 1e6)
        assert found[run_id] == (error, history.deadline_missed(0, error))
