"""Executing one attempt of a run: the callable, its context and its ending.

Sync tasks run on the worker's threads and async tasks on its event loop.
An attempt is *settled* exactly once (its outcome reported, or dropped when
the store took it away); a sync thread that ignores a stop request still
occupies its slot of the worker's capacity until it really returns, so a
worker never runs more than `max_workers` things at once.
"""

from __future__ import annotations

import asyncio
import ctypes
import inspect
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from opentelemetry.trace import INVALID_SPAN, Span

from tidegate.domain.model import ClaimedRun
from tidegate.domain.snooze import DEFAULT_MAX_SNOOZES
from tidegate.worker.context import Cancelled, Context
from tidegate.workflow import StepError, WorkflowDefinition
from tidegate.workflow.errors import error_text


class AttemptInterrupted(BaseException):
    """Raised inside a sync task's thread to stop it (cancel, timeout, shutdown).

    A BaseException so that a task's `except Exception` does not swallow it.
    """


@dataclass(frozen=True)
class TaskFunction:
    """A registered callable as the worker needs it; `workflow` is set for a workflow's builder."""

    name: str
    fn: Callable[..., Any]
    context_param: str | None
    workflow: WorkflowDefinition | None = None
    max_snoozes: int = DEFAULT_MAX_SNOOZES  # a run's snoozes before the next one fails it (domain/snooze.py)
    # By queue: the exception types that report the downstream overloaded (`Adaptive.overloaded_by`).
    overloaded_by: Mapping[str, tuple[type[BaseException], ...]] = field(default_factory=dict)

    @cached_property  # asked at every dispatch; inspecting the callable each time showed in a drain's profile
    def is_async(self) -> bool:
        """Runs on the worker's loop: async tasks, and workflows (which await their steps)."""
        return self.workflow is not None or inspect.iscoroutinefunction(self.fn)

    def call_args(self, args: dict[str, Any], context: Context) -> dict[str, Any]:
        if self.context_param is None:
            return args
        return {**args, self.context_param: context}


class Attempt:
    """One attempt in flight on this worker."""

    def __init__(self, run: ClaimedRun, task: TaskFunction | None, claim_sent: float) -> None:
        self.run = run
        self.task = task
        self.claim_sent = claim_sent  # monotonic: the store stamped the claim's lease no earlier
        self.context = Context(run.id, run.attempt, run.task, run.queue)
        self.span: Span = INVALID_SPAN  # its trace span (engine/runtime/tracing.py), ended when its slot is freed
        self.settled = False  # set once, by `claim_settlement`
        self.reporting = False  # its own thread is writing its outcome (`Dispatcher._report_now`)
        self.stop_reason: str | None = None  # why the worker asked it to stop
        self.thread_ident: int | None = None
        self.async_task: Any = None  # asyncio.Task for async tasks
        self.workflow_stopping: asyncio.Event | None = None  # set to stop a workflow gracefully
        self.timers: list[Any] = []
        self._thread_lock = threading.Lock()

    def enter_thread(self) -> None:
        with self._thread_lock:
            self.thread_ident = threading.get_ident()

    def leave_thread(self) -> None:
        """After this, `interrupt` no longer targets the thread (which moves on to other work)."""
        with self._thread_lock:
            self.thread_ident = None

    @property
    def fence(self) -> tuple[str, int]:
        return self.run.fence

    def claim_settlement(self, reporting: bool = False) -> bool:
        """True for the one caller that settles the attempt. The loop settles it (an outcome, a
        timeout, a cancel, a lost lease), and so may the attempt's own thread when it reports its
        outcome itself (`reporting`): whichever comes first, the other must not report a second
        outcome."""
        with self._thread_lock:
            if self.settled:
                return False
            self.settled = True
            self.reporting = reporting
            return True

    @property
    def replayed_only(self) -> bool:
        """The attempt's triggers were all answered from the store (a resumed parent's replay)."""
        link = self.context._children
        return link is not None and link.replayed_only

    def interrupt(self) -> None:
        """Stop the attempt's code now: cancel its asyncio task or raise in its thread."""
        if self.async_task is not None:
            self.async_task.cancel()
            return
        with self._thread_lock:
            if self.thread_ident is not None:
                ctypes.pythonapi.PyThreadState_SetAsyncExc(
                    ctypes.c_ulong(self.thread_ident), ctypes.py_object(AttemptInterrupted)
                )


def describe_error(error: BaseException) -> str:
    """'Type: message' then the traceback, bounded so a huge one cannot bloat the store.

    A workflow that failed on a step reads as that step's error
    (`step heavy_query[3] failed: ValueError: ...` and the step's traceback):
    the orchestrator's own traceback would only hide it.
    """
    if isinstance(error, (AttemptInterrupted, Cancelled)):
        return f"{type(error).__name__}: {error}"
    if isinstance(error, StepError):
        return str(error)
    return error_text(error)
