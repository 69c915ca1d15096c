"""Fixtures of the step-level gate contracts (pools, slots, hand-offs), on both adapters.

Here `store` is the store of a real App rather than the bare adapter of
../conftest.py: the contracts submit runs through a registered task (`job`) and
then drive the port's verbs directly with explicit fences, so every interleaving
is exact rather than left to timing. The helpers are imported by both modules of
this folder as `.conftest`.
"""

from __future__ import annotations

import pytest

from tidegate import App, Task
from tidegate.domain.model import CycleRequest
from tidegate.storage.port import Fence, Store

QUEUE = "steps"


@pytest.fixture
def job(app: App) -> Task:
    @app.task(name="t.workflow", queue=QUEUE, max_attempts=3)
    def workflow() -> None:
        return None

    return workflow


@pytest.fixture
def store(app: App) -> Store:
    return app.store


def claim(store: Store, job: Task, worker: str = "w1", lease: float = 30.0) -> Fence:
    """Submit a run and claim it: the fence (run id, attempt) of a running attempt."""
    handle = job.submit()
    [run] = store.cycle(CycleRequest(worker, [QUEUE], [], [], 1, lease)).claimed
    assert run.id == handle.id
    return run.fence


def step_events(store: Store, run_id: str, key: str | None = None) -> list[str]:
    return [e.type for e in store.run_events(run_id) if e.step_key is not None and (key is None or e.step_key == key)]


def usage(store: Store) -> dict[str, int]:
    return {pool.name: pool.claimed for pool in store.pools()}
