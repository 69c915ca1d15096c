"""From HTTP submit requests to stored runs: every rule is the domain's, every error names its field.

Each value is checked by the same function a Python submit uses, one field
at a time so that a 422 says which one is wrong; then the app's own
`TaskOptions` builds the runs (args as JSON, their size, the signature when
this process has the task's code, the partition). A batch is built whole
before one `App.enqueue` stores it, so a bad item or a full queue stores nothing.

The server may run without the user's module: a task is then known by what
its workers registered in the store (queue, priority, tags, retries).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tidegate.api.errors import blame
from tidegate.api.schemas import SubmitRequest
from tidegate.app import App, RunHandle, Task, TaskOptions
from tidegate.domain import names
from tidegate.domain.clock import Clock
from tidegate.domain.errors import UnknownTask
from tidegate.domain.limits import QueueConfig
from tidegate.domain.model import NewRun, TaskDefinition


class _RequestTarget:
    """The app as the `RunTarget` of one request's runs, reading each queue's declaration once.

    A bare app (a server without the user's module) reads a queue's declaration
    from the store's rules, a round trip on PostgreSQL: a batch of a thousand runs
    of one queue asks once, not a thousand times, and the check that names the
    `queue` field reuses the answer the runs are built with.
    """

    def __init__(self, app: App) -> None:
        self._app = app
        self._queues: dict[str, QueueConfig] = {}

    @property
    def max_payload(self) -> int:
        return self._app.max_payload

    @property
    def clock(self) -> Clock:
        return self._app.clock

    def queue_config(self, name: str) -> QueueConfig:
        if name not in self._queues:
            self._queues[name] = self._app.queue_config(name)
        return self._queues[name]

    def enqueue(self, runs: Sequence[NewRun]) -> list[RunHandle]:
        return self._app.enqueue(runs)


def submit(app: App, requests: Sequence[SubmitRequest], *, prefix: str = "") -> list[NewRun]:
    """Validate and store `requests` together (all or none); `prefix` places a batch item's fields."""
    target = _RequestTarget(app)
    runs: list[NewRun] = []
    for index, request in enumerate(requests):
        runs.extend(_build(app, target, request, f"{prefix}{index}." if prefix else ""))
    # One transaction for the whole batch, after this process's task and limit declarations
    # are registered (so the ceilings of a loaded module are in force), as every submit does.
    target.enqueue(runs)
    return runs


def _build(app: App, target: _RequestTarget, request: SubmitRequest, at: str) -> list[NewRun]:
    with blame(f"{at}task"):
        definition, task = _definition(app, request.task)
    queue = definition.queue if request.queue is None else request.queue
    with blame(f"{at}queue"):
        target.queue_config(names.check_name("queue", queue))  # an undeclared queue is refused here
    with blame(f"{at}priority"):
        priority = definition.priority if request.priority is None else names.check_priority(request.priority)
    with blame(f"{at}tags"):
        tags = names.check_tags(request.tags)
    with blame(f"{at}concurrency_key"):
        key = names.check_concurrency_key(request.concurrency_key)
    check_args = None if task is None else task.check_args
    options = TaskOptions(target, definition, check_args, priority, tags or None, queue, request.run_at, key)
    with blame(f"{at}run_at"):
        options.due_in()  # how far ahead a run may be: checked here to name the field
    with blame(f"{at}args"):
        return options.new_runs([request.args])


def _definition(app: App, name: str) -> tuple[TaskDefinition, Task | None]:
    """The task's defaults: from this process's code if it has it, else as its workers registered them."""
    known = app.tasks.get(name)
    if known is not None:
        return known.definition, known
    definition = app.store.get_task(names.check_name("task", name))
    if definition is None:
        raise UnknownTask(f"unknown task {name!r}: no worker of this database has registered it")
    return definition, None


def submitted_fields(run: NewRun) -> Mapping[str, Any]:
    return {
        "id": run.id,
        "task": run.task,
        "queue": run.queue,
        "partition": run.partition,
        "priority": run.priority,
        "tags": run.tags,
    }
