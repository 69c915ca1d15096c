"""`RunHandle`: what submit returns, and how a caller follows a run."""

from __future__ import annotations

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
        if timeout is not None:
            timeout = parse_duration(timeout, name="timeout")
        deadline = None if timeout is None else self._clock.monotonic() + timeout
        pause = _FIRST_POLL
        while True:
            record = self.info()
            if record.status is RunStatus.COMPLETED:
                return record.result
            if record.status is RunStatus.FAILED:
                raise RunFailed(self.id, record.error)
            if record.status is RunStatus.CANCELED:
                raise RunCanceled(self.id, record.error)
            if deadline is not None and self._clock.monotonic() >= deadline:
                raise WaitTimeout(f"run {self.id} is still {record.status.value} after {timeout:g}s")
            remaining = pause if deadline is None else min(pause, max(0.0, deadline - self._clock.monotonic()))
            time.sleep(remaining)
            pause = min(_MAX_POLL, pause * 2)

    def __repr__(self) -> str:
        return f"RunHandle({self.id!r})"
