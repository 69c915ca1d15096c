"""From HTTP submit requests to stored runs: every rule is the domain's, every error names its field.

Each value is checked by the same function a Python submit uses, one field
at a time so that a 422 says which one is wrong; then the app's own
`TaskOptions` builds the runs (args as JSON, their size, the signature when
this process has the task's code, the partition). A batch is built whole
before one `enqueue` stores it, so a bad item or a full queue stores nothing.

The server may run without the user's module: a task is then known by what
its workers registered in the store (queue, priority, tags, retries).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

from tidegate.api.errors import blame
from tidegate.api.schemas import SubmitRequest
from tidegate.app import App, Task, TaskOptions
from tidegate.app.tasks import _delay_until as check_run_at  # the one rule for how far ahead a run may be
from tidegate.domain import names
from tidegate.domain.errors import UnknownTask
from tidegate.domain.limits import QueueConfig
from tidegate.domain.model import NewRun, TaskDefinition


class _Collector:
    """Stands in for the App while `TaskOptions` builds runs: it keeps them instead of storing them."""

    def __init__(self, app: App) -> None:
        self._app = app
        self.max_payload = app.max_payload
        self.runs: list[NewRun] = []
        self._queues: dict[str, QueueConfig] = {}

    def queue_config(self, name: str) -> QueueConfig:
        """The app's answer, asked once per queue and batch (a bare app reads the store's rules)."""
        if name not in self._queues:
            self._queues[name] = self._app.queue_config(name)
        return self._queues[name]

    def _enqueue(self, runs: Sequence[NewRun]) -> list[Any]:
        self.runs.extend(runs)
        return []


def submit(app: App, requests: Sequence[SubmitRequest], *, prefix: str = "") -> list[NewRun]:
    """Validate and store `requests` together (all or none); `prefix` places a batch item's fields."""
    collector = _Collector(app)
    for index, request in enumerate(requests):
        _build(app, collector, request, f"{prefix}{index}." if prefix else "")
    # App._enqueue registers this process's task and limit declarations (so the ceilings of a
    # loaded module are in force) and stores the runs in one transaction, as TaskOptions does.
    app._enqueue(collector.runs)
    return collector.runs


def _build(app: App, collector: _Collector, request: SubmitRequest, at: str) -> None:
    with blame(f"{at}task"):
        definition, task = _definition(app, request.task)
    queue = definition.queue if request.queue is None else request.queue
    with blame(f"{at}queue"):
        collector.queue_config(names.check_name("queue", queue))  # an undeclared queue is refused here
    with blame(f"{at}priority"):
        priority = definition.priority if request.priority is None else names.check_priority(request.priority)
    with blame(f"{at}tags"):
        tags = names.check_tags(request.tags)
    with blame(f"{at}concurrency_key"):
        key = names.check_concurrency_key(request.concurrency_key)
    with blame(f"{at}run_at"):
        check_run_at(request.run_at)
    options = TaskOptions(cast(App, collector), definition, task, priority, tags or None, queue, request.run_at, key)
    with blame(f"{at}args"):
        options.submit_many([request.args])


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
