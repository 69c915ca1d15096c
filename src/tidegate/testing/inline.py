"""`run_inline(task, **args)`: call a task here and now, as a worker would see it.

The args are checked as every submit checks them (JSON, the task's parameters,
the payload size) and reach the function through a JSON round trip, as from
the store; the result goes back through the check a worker makes and the same
round trip. So a task that only works with Python objects a run can never
carry (a tuple read back as a list, a datetime, a set) fails here as it would
in production, without a database or a worker.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from typing import Any

from tidegate.app import Task, settings
from tidegate.app.steps import WorkflowTask
from tidegate.domain.errors import InvalidArgument
from tidegate.domain.jsonvalue import dumps, ensure_payload
from tidegate.worker.context import Context

INLINE_RUN_ID = "inline"  # the run id a task's Context reads when run inline


def run_inline(task: Task, /, **args: Any) -> Any:
    """The task's result for `args` (JSON as stored), or the task's own exception raised.

    A task taking a `tidegate.Context` gets one for run id "inline", attempt 1; triggering
    children needs a worker (`tidegate_drain`), as do workflows.
    """
    if isinstance(task, WorkflowTask):
        raise TypeError(f"{task.name} is a workflow: run it with tidegate_drain, which executes its steps")
    if not isinstance(task, Task):
        raise TypeError(f"run_inline takes a task (@app.task), got {task!r}")
    max_payload = settings.max_payload()
    ensure_payload(args, f"{task.name}: args", max_payload)
    task.check_args(args)
    stored = json.loads(dumps(args))
    function = task.function
    context = Context(INLINE_RUN_ID, 1, task.name, task.definition.queue)
    try:
        value = function.fn(**function.call_args(stored, context))
        if inspect.isawaitable(value):
            value = asyncio.run(_awaited(value))
    finally:
        context._remove_workdir()  # as a worker does at the attempt's end
    try:
        ensure_payload(value, "result", max_payload)
    except InvalidArgument as error:  # what a worker fails the attempt with
        raise InvalidArgument(f"{task.name}: InvalidResult: {error}") from None
    return json.loads(dumps(value))


async def _awaited(value: Any) -> Any:
    return await value
