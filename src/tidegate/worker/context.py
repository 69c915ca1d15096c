"""What a running task may know about itself: `tidegate.Context`.

A task declares a parameter annotated `tidegate.Context` to receive one. The
run id and attempt number are the idempotency keys of an at-least-once
system; the cancellation signal lets long work stop early and cleanly.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from tidegate.domain.children import CANCEL
from tidegate.domain.errors import TidegateError
from tidegate.domain.rate_costs import check_report
from tidegate.engine.runtime.children import RunsBuilder, Triggerable, result_of
from tidegate.worker.children import ChildLink


class Cancelled(Exception):
    """Raised by `Context.raise_if_cancelled()` once the attempt was asked to stop."""


class Context:
    def __init__(self, run_id: str, attempt: int, task: str, queue: str) -> None:
        self.run_id = run_id
        self.attempt = attempt
        self.task = task
        self.queue = queue
        self.cancel_reason: str | None = None
        self._cancelled = threading.Event()
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self._lock = threading.Lock()
        self._workdir: Path | None = None
        self._children: ChildLink | None = None  # set by the worker that runs the attempt
        self._costs: Callable[[int], bool] | None = None  # the store's report_cost for this attempt

    # --- children (issue 13) ---------------------------------------------------------------

    def trigger(self, task: Triggerable | RunsBuilder, *, on_parent_cancel: str = CANCEL, **args: Any) -> str:
        """Submit a child run (fire and forget, linked to this run); its run id.

        Submit options come with the task: `ctx.trigger(task.options(queue=...), **args)`; a
        child runs on its task's queue, not this run's, unless asked (`queue=ctx.queue`). A
        resumed run replaying this call gets the child stored the first time, not a new one.
        """
        return self._link().trigger(task, [args], wait=False, on_parent_cancel=on_parent_cancel)[0].id

    def trigger_and_wait(
        self,
        task: Triggerable | RunsBuilder,
        *,
        release: str | None = None,
        on_parent_cancel: str = CANCEL,
        **args: Any,
    ) -> Any:
        """Trigger a child and return its result (RunFailed / RunCanceled if it did not complete).

        While the child runs this run waits holding no worker: its attempt ends `waiting`,
        and once the child has ended the run is queued again and runs its function again
        from the top, each earlier trigger answered from the store (see docs/concepts/waits.md,
        the replay contract). `release="all"` releases every run-level slot while waiting.
        """
        return self.batch_trigger_and_wait(task, [args], release=release, on_parent_cancel=on_parent_cancel)[0]

    def batch_trigger_and_wait(
        self,
        task: Triggerable | RunsBuilder,
        many_args: Sequence[Mapping[str, Any]],
        *,
        release: str | None = None,
        on_parent_cancel: str = CANCEL,
    ) -> list[Any]:
        """Trigger one child per args and wait for all: their results in order (the first
        failed or canceled child, by position, raises)."""
        children = self._link().trigger(task, many_args, wait=True, release=release, on_parent_cancel=on_parent_cancel)
        return [result_of(child) for child in children]

    async def trigger_and_wait_async(
        self,
        task: Triggerable | RunsBuilder,
        *,
        release: str | None = None,
        on_parent_cancel: str = CANCEL,
        **args: Any,
    ) -> Any:
        """`trigger_and_wait` for async tasks (the store call runs off the event loop)."""
        results = await self.batch_trigger_and_wait_async(
            task, [args], release=release, on_parent_cancel=on_parent_cancel
        )
        return results[0]

    async def batch_trigger_and_wait_async(
        self,
        task: Triggerable | RunsBuilder,
        many_args: Sequence[Mapping[str, Any]],
        *,
        release: str | None = None,
        on_parent_cancel: str = CANCEL,
    ) -> list[Any]:
        """`batch_trigger_and_wait` for async tasks."""
        link = self._link()
        children = await asyncio.get_running_loop().run_in_executor(
            None,
            lambda: link.trigger(task, many_args, wait=True, release=release, on_parent_cancel=on_parent_cancel),
        )
        return [result_of(child) for child in children]

    # --- rates (issue 25) ---------------------------------------------------------------------

    def report_cost(self, cost: int) -> bool:
        """Correct what this attempt takes of its queue's rate to `cost` units (from 0), once it knows
        (a reply's token count): the difference is taken, or given back as far as it is unspent, at
        once. False when the attempt is no longer this worker's (nothing changed)."""
        checked = check_report(cost)
        if self._costs is None:
            raise TidegateError("report_cost needs a run executed by a tidegate worker")
        return self._costs(checked)

    async def report_cost_async(self, cost: int) -> bool:
        """`report_cost` for async tasks (the store call runs off the event loop)."""
        checked = check_report(cost)
        return await asyncio.get_running_loop().run_in_executor(None, self.report_cost, checked)

    def _link(self) -> ChildLink:
        if self._children is None:
            raise TidegateError("triggering children needs a run executed by a tidegate worker")
        return self._children

    @property
    def workdir(self) -> Path:
        """A scratch directory of this attempt alone, removed when it ends.

        Two attempts of one run (a retry, or a rescue while a stuck thread
        lingers) never share files, so neither can corrupt the other's.
        """
        with self._lock:
            if self._workdir is None:
                self._workdir = Path(tempfile.mkdtemp(prefix=f"tidegate-{self.run_id}-{self.attempt}-"))
            return self._workdir

    def _remove_workdir(self) -> None:
        with self._lock:
            workdir, self._workdir = self._workdir, None
        if workdir is not None:
            shutil.rmtree(workdir, ignore_errors=True)

    @property
    def cancelled(self) -> bool:
        """True once the run was canceled, timed out, lost its lease or its worker is leaving."""
        return self._cancelled.is_set()

    def raise_if_cancelled(self) -> None:
        if self._cancelled.is_set():
            raise Cancelled(self.cancel_reason or "canceled")

    def wait_cancelled_sync(self, timeout: float | None = None) -> bool:
        """Block a sync task until cancellation (or `timeout`); True if it was cancelled."""
        return self._cancelled.wait(timeout)

    async def wait_cancelled(self) -> None:
        """Await cancellation, e.g. raced against the work in an async task."""
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._cancelled.is_set():
                return
            future: asyncio.Future[None] = loop.create_future()
            self._waiters.append((loop, future))
        await future

    def _cancel(self, reason: str) -> None:
        with self._lock:
            if self._cancelled.is_set():
                return
            self.cancel_reason = reason
            self._cancelled.set()
            waiters, self._waiters = self._waiters, []
        for loop, future in waiters:
            loop.call_soon_threadsafe(_resolve, future)

    def __repr__(self) -> str:
        return f"Context(run_id={self.run_id!r}, attempt={self.attempt}, task={self.task!r})"


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
