"""Once per key against a model (issue 26): keyed submits interleaved with the ends of runs and time.

A hypothesis state machine drives the store (SQLite and PostgreSQL) through submits of a few keys
(`on_conflict` existing or raise), claims, completions, failures, cancels and the injected clock
moving past a completed run's `period`, and keeps a model of which run holds each key by the rule
of domain/unique.py: a run holds while queued, running or waiting; a completed run only within
`period` of its submit; a failed or canceled run never. Every submit's answer must be the model's,
and after every step the store's runs must agree with the model and hold each key at most once.

Each example gets its own queue and keys, so the examples of one test share the store untouched.
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from typing import Any, ClassVar

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

from tidegate import DuplicateRun, RunStatus
from tidegate.domain.clock import ShiftedClock
from tidegate.domain.keys import ACTIVE_STATES, RunKey
from tidegate.domain.model import CycleRequest
from tidegate.storage.port import Store

from .conftest import completed, failed, new_run

PERIOD = 100.0  # a completed run holds its key this long after its submit
STEP = 45.0  # one move of the clock: elapsed times land on 0, 45, 90, 135... never near PERIOD
LEASE = 100_000.0  # no claim's lease runs out while the clock moves: only the rules under test end runs
KEYS = ("a", "b", "c")
HOLDING = frozenset({RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.WAITING})


class UniqueKeys(RuleBasedStateMachine):
    """The model: each run's key, status, and clock moves since its submit."""

    store: ClassVar[Store]
    clock: ClassVar[ShiftedClock]

    def __init__(self) -> None:
        super().__init__()
        self.queue = f"hyp-{uuid.uuid4().hex[:12]}"
        self.runs: dict[str, dict[str, Any]] = {}  # id -> key, status, elapsed (seconds since submit)
        self.fences: dict[str, tuple[str, int]] = {}  # running run -> its claimed attempt

    def _holds(self, run: dict[str, Any]) -> bool:
        return run["status"] in HOLDING or (run["status"] is RunStatus.COMPLETED and run["elapsed"] < PERIOD)

    def _holder(self, key: str) -> str | None:
        holding = [run_id for run_id, run in self.runs.items() if run["key"] == key and self._holds(run)]
        assert len(holding) <= 1, f"the model has two holders of {key}: {holding}"
        return holding[0] if holding else None

    def _in(self, status: RunStatus) -> list[str]:
        return sorted(run_id for run_id, run in self.runs.items() if run["status"] is status)

    @rule(key=st.sampled_from(KEYS), mode=st.sampled_from(["existing", "raise"]))
    def submit(self, key: str, mode: str) -> None:
        claim = RunKey(f"{self.queue}:{key}", ACTIVE_STATES, PERIOD, mode)
        run = replace(new_run(self.queue, args={"key": key}), unique=claim)
        holder = self._holder(key)
        if holder is not None and mode == "raise":
            with pytest.raises(DuplicateRun) as raised:
                self.store.enqueue_unique([run])
            assert raised.value.run_id == holder
            return
        [answer] = self.store.enqueue_unique([run])
        if holder is not None:
            assert (answer.run_id, answer.duplicate) == (holder, True)
            return
        assert (answer.run_id, answer.duplicate) == (run.id, False), f"{key} was not free in the store"
        self.runs[run.id] = {"key": key, "status": RunStatus.QUEUED, "elapsed": 0.0}

    @precondition(lambda self: bool(self._in(RunStatus.QUEUED)))
    @rule()
    def claim(self) -> None:
        [claimed] = self.store.cycle(CycleRequest("w-hyp", [self.queue], [], [], 1, LEASE)).claimed
        assert self.runs[claimed.id]["status"] is RunStatus.QUEUED
        fence = (claimed.id, claimed.attempt)
        self.store.cycle(CycleRequest("w-hyp", [self.queue], [fence], [], 0, LEASE))  # started
        self.runs[claimed.id]["status"] = RunStatus.RUNNING
        self.fences[claimed.id] = fence

    @precondition(lambda self: bool(self._in(RunStatus.RUNNING)))
    @rule(data=st.data(), succeeds=st.booleans())
    def end(self, data: st.DataObject, succeeds: bool) -> None:
        run_id = data.draw(st.sampled_from(self._in(RunStatus.RUNNING)))
        fence = self.fences.pop(run_id)
        outcome = completed(fence) if succeeds else failed(fence)  # max_attempts=1: a failure is final
        assert self.store.cycle(CycleRequest("w-hyp", [self.queue], [], [outcome], 0, LEASE)).fenced_out == []
        self.runs[run_id]["status"] = RunStatus.COMPLETED if succeeds else RunStatus.FAILED

    @precondition(lambda self: bool(self._in(RunStatus.QUEUED)))
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        run_id = data.draw(st.sampled_from(self._in(RunStatus.QUEUED)))
        assert self.store.cancel_run(run_id) is RunStatus.CANCELED
        self.runs[run_id]["status"] = RunStatus.CANCELED

    @rule()
    def advance(self) -> None:
        self.clock.advance(STEP)
        for run in self.runs.values():
            run["elapsed"] += STEP

    @invariant()
    def the_store_agrees_and_holds_each_key_once(self) -> None:
        stored = {record.id: record for record in self.store.page_runs(queue=self.queue)}
        assert set(stored) == set(self.runs)
        holders: dict[str, list[str]] = {}
        for run_id, run in self.runs.items():
            assert stored[run_id].status is run["status"], (run_id, stored[run_id].status, run["status"])
            if self._holds({**run, "status": stored[run_id].status}):
                holders.setdefault(run["key"], []).append(run_id)
        assert all(len(ids) == 1 for ids in holders.values()), holders


def test_keys_against_a_model(store: Store, clock: ShiftedClock) -> None:
    UniqueKeys.store, UniqueKeys.clock = store, clock
    run_state_machine_as_test(
        UniqueKeys,
        settings=settings(
            max_examples=20,
            stateful_step_count=30,
            deadline=None,
            suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
        ),
    )
