"""Fixtures of the conformance suite: the Store port driven directly, on both adapters.

`store` is a real adapter opened by the composition root (`open_store`) on the
backend-parametrized `database_url`, with no App in front of it, so what a
contract test sees is the port's own behaviour. Its time comes from the shared `clock`, a
`ShiftedClock`: a contract that needs a lease or a turn to lapse advances it
instead of sleeping, and is marked `advances_clock` (see below).

The shared fixtures (backend parametrization, apps, workers) live in
tests/conftest.py; the helpers re-exported at the bottom are those this
folder's older modules import as `.conftest`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from tests.conftest import event_types, execute_sql, raw_store, wait_until
from tidegate.bootstrap import open_store
from tidegate.domain.clock import ShiftedClock
from tidegate.domain.jsonvalue import JSONValue
from tidegate.domain.model import ClaimedRun, CycleRequest, NewRun, Outcome, OutcomeKind
from tidegate.domain.run_ids import new_run_id
from tidegate.storage.port import Fence, Store

QUEUE = "contract"
LEASE = 30.0


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "advances_clock: the contract moves the store's clock (`clock.advance`)")
    config.addinivalue_line(
        "markers",
        "adapter_difference(backend, reason): this adapter breaks the contract today (strict xfail there, reported)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Expected failures per backend, as strict xfails: each turns red the day it is fixed."""
    for item in items:
        params = getattr(item, "callspec", None)
        backend = params.params.get("database_url") if params else None
        for marker in item.iter_markers("adapter_difference"):
            if marker.args[0] == backend:
                item.add_marker(pytest.mark.xfail(strict=True, reason=f"adapter difference: {marker.args[1]}"))


@pytest.fixture
def store(database_url: str, clock: ShiftedClock) -> Iterator[Store]:
    """A migrated adapter for this test's database (SQLite file or PostgreSQL schema)."""
    opened = open_store(database_url, clock=clock)
    try:
        yield opened
    finally:
        opened.close()


def new_run(
    queue: str = QUEUE,
    *,
    task: str = "t.contract",
    partition: str = "",
    args: dict[str, JSONValue] | None = None,
    priority: int = 0,
    tags: dict[str, str] | None = None,
    concurrency_key: str | None = None,
    max_attempts: int = 1,
    retry_backoff: float = 1.0,
    timeout: float | None = None,
    delay: float = 0.0,
    deadline: float | None = None,
) -> NewRun:
    """A run as the app would submit it, with a fresh id."""
    return NewRun(
        id=new_run_id(),
        task=task,
        queue=queue,
        partition=partition,
        args=args if args is not None else {},
        priority=priority,
        tags=tags or {},
        concurrency_key=concurrency_key,
        max_attempts=max_attempts,
        retry_backoff=retry_backoff,
        timeout=timeout,
        delay=delay,
        deadline=deadline,
    )


def enqueue_one(store: Store, queue: str = QUEUE, **options: Any) -> str:
    """Store one run and return its id."""
    run = new_run(queue, **options)
    store.enqueue([run])
    return run.id


def claim(
    store: Store, worker: str = "w1", limit: int = 1, queues: Sequence[str] = (QUEUE,), lease: float = LEASE
) -> list[ClaimedRun]:
    """One claim-only cycle for `worker`."""
    return store.cycle(CycleRequest(worker, list(queues), [], [], limit, lease)).claimed


def start(store: Store, worker: str, fences: Sequence[Fence], queues: Sequence[str] = (QUEUE,)) -> None:
    """Record the starts of claimed attempts (a cycle that claims nothing)."""
    store.cycle(CycleRequest(worker, list(queues), list(fences), [], 0, LEASE))


def completed(fence: Fence, result: JSONValue = None) -> Outcome:
    return Outcome(fence[0], fence[1], OutcomeKind.COMPLETED, result=result)


def failed(fence: Fence, error: str = "boom", retry_delay: float | None = None) -> Outcome:
    return Outcome(fence[0], fence[1], OutcomeKind.FAILED, error=error, retry_delay=retry_delay)


__all__ = [
    "LEASE",
    "QUEUE",
    "claim",
    "completed",
    "enqueue_one",
    "event_types",
    "execute_sql",
    "failed",
    "new_run",
    "raw_store",
    "start",
    "wait_until",
]
