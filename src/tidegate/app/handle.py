"""`RunHandle`: what submit returns, and how a caller follows a run."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from tidegate.domain.clock import SYSTEM_CLOCK, Clock
from tidegate.domain.durations import parse_duration
from tidegate.domain.errors import RunCanceled, RunFailed, RunNotFound, WaitTimeout
from tidegate.domain.model import RunRecord, RunStatus
from tidegate.storage.port import Store

_FIRST_POLL = 0.005
_MAX_POLL = 0.1


class RunHandle:
    def __init__(self, store: Store, run_id: str, *, clock: Clock = SYSTEM_CLOCK, duplicate: bool = False) -> None:
        """`clock`: where `wait` reads its deadline (the app's); its pauses are real time. `duplicate`:
        the submit that made this handle met a run holding its unique key, and this is that run."""
        self._store = store
        self.id = run_id
        self.duplicate = duplicate
        self._clock = clock

    def info(self) -> RunRecord:
        record = self._store.get_run(self.id)
        if record is None:
            raise RunNotFound(f"no run with id {self.id!r}")
        return record

    def status(self) -> RunStatus:
        return self.info().status

    def cancel(self) -> RunStatus:
        """Cancel now if queued; if running, its worker is told and stops it. Returns the status after."""
        return self._store.cancel_run(self.id)

    def wait(self, timeout: str | float | None = None) -> Any:
        """The run's result once it completes; RunFailed / RunCanceled if it did not.

        Raises WaitTimeout after `timeout` (seconds or a duration like '30s'; the run itself goes on).
        """
        waiting = _Wait(self.id, self._clock, timeout)
        while True:
            record = self.info()
            if waiting.ended(record):
                return record.result
            time.sleep(waiting.pause())

    # --- from an event loop (PostgreSQL: the store's async pool, no thread; SQLite: a thread hop) ---

    async def info_async(self) -> RunRecord:
        record = await self._store.submits.get_run_async(self.id)
        if record is None:
            raise RunNotFound(f"no run with id {self.id!r}")
        return record

    async def status_async(self) -> RunStatus:
        return (await self.info_async()).status

    async def cancel_async(self) -> RunStatus:
        """`cancel` from an event loop."""
        return await self._store.submits.cancel_run_async(self.id)

    async def wait_async(self, timeout: str | float | None = None) -> Any:  # noqa: ASYNC109 - `wait`'s own argument
        """`wait` from an event loop: the same outcomes and timeout, its pauses `asyncio.sleep`.
        Canceling the awaiting task leaves the run alone and no connection held."""
        waiting = _Wait(self.id, self._clock, timeout)
        while True:
            record = await self.info_async()
            if waiting.ended(record):
                return record.result
            await asyncio.sleep(waiting.pause())

    def __repr__(self) -> str:
        return f"RunHandle({self.id!r})"


class _Wait:
    """One wait's deadline and pauses (growing to `_MAX_POLL`), shared by `wait` and `wait_async`."""

    def __init__(self, run_id: str, clock: Clock, timeout: str | float | None) -> None:
        self._run_id = run_id
        self._clock = clock
        self._timeout = None if timeout is None else parse_duration(timeout, name="timeout")
        self._deadline = None if self._timeout is None else clock.monotonic() + self._timeout
        self._pause = _FIRST_POLL

    def ended(self, record: RunRecord) -> bool:
        """True once the run completed; raises if it failed, was canceled, or the time is up."""
        if record.status is RunStatus.COMPLETED:
            return True
        if record.status is RunStatus.FAILED:
            raise RunFailed(self._run_id, record.error)
        if record.status is RunStatus.CANCELED:
            raise RunCanceled(self._run_id, record.error)
        if self._deadline is not None and self._clock.monotonic() >= self._deadline:
            raise WaitTimeout(f"run {self._run_id} is still {record.status.value} after {self._timeout:g}s")
        return False

    def pause(self) -> float:
        """How long to sleep before the next read (never past the deadline)."""
        pause = self._pause
        self._pause = min(_MAX_POLL, pause * 2)
        if self._deadline is None:
            return pause
        return min(pause, max(0.0, self._deadline - self._clock.monotonic()))
