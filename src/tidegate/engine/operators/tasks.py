"""Registered tasks and the limits their runs meet, as `tidegate tasks list` shows them.

The limits are those a claim and a submit apply, asked of the same rules
(`Rules.scopes_for`, `ceilings_met`), never worked out again here: the global
cap, the queue's limit (per partition when the queue is partitioned), the tag
limits its default tags fall under (tags given at submit may add others), the
admission ceilings, and the per-worker caps of its queue.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tidegate.domain.limits import Partition
from tidegate.domain.model import TaskDefinition, TaskRegistration
from tidegate.domain.scopes import Rules, queue_scope
from tidegate.domain.transitions import ceilings_met
from tidegate.engine.operators.limit_table import partition_text
from tidegate.engine.operators.why import label_of
from tidegate.storage.port import Store


@dataclass(frozen=True)
class LimitMet:
    """One limit every run of a task meets with its default options."""

    name: str  # a scope key (`global`, `queue:api`, `tag:env=prod`), else the setting (`max_active(api)`)
    label: str  # as an operator names it ("max_concurrent_runs", "queue api", "max_active of queue api")
    limit: int
    kind: str  # "scope": a slot held while running; "admission": counted at submit; "worker": per worker
    per: str | None = None  # a partitioned queue's limit applies per partition: by what

    def text(self) -> str:
        return f"{self.name} {self.limit}" + (f" per {self.per}" if self.per else "")


@dataclass(frozen=True)
class TaskView:
    registration: TaskRegistration
    limits: list[LimitMet]
    paused: bool  # its queue is paused: its runs queue but none starts

    def document(self) -> dict[str, Any]:
        """The task as `tasks list --json` and `GET /api/v1/tasks` show it: one shape for both."""
        registration = self.registration
        definition = registration.definition
        parameters = definition.parameters
        return {
            "name": definition.name,
            "queue": definition.queue,
            "paused": self.paused,
            "priority": definition.priority,
            "tags": definition.tags,
            "max_attempts": definition.max_attempts,
            "timeout": definition.timeout,
            "signature": None if parameters is None else parameters.text(),
            "parameters": None if parameters is None else parameters.to_json(),
            "limits": [
                {"name": limit.name, "kind": limit.kind, "label": limit.label, "limit": limit.limit, "per": limit.per}
                for limit in self.limits
            ],
            "worker": registration.worker_id,
            "worker_seen_at": registration.worker_seen_at,
            "registered_at": registration.updated_at,
        }


def task_views(store: Store, queue: str | None = None) -> list[TaskView]:
    """Every registered task (of `queue`, if given), by name, with the limits its runs meet now."""
    rules = store.rules()
    return [
        TaskView(
            registration, limits_met(rules, registration.definition), rules.is_paused(registration.definition.queue)
        )
        for registration in store.list_tasks()
        if queue is None or registration.definition.queue == queue
    ]


def limits_met(rules: Rules, task: TaskDefinition) -> list[LimitMet]:
    """The limits a run of `task` meets when submitted with its defaults (live overrides included)."""
    config = rules.queues.get(task.queue)
    partition = config.concurrency.partition if config is not None else Partition()
    per = partition_text(partition, kind="task", sep=", ") if partition.enabled else None
    met = []
    for need in rules.scopes_for(task.queue, "", task.tags):  # "" stands for any partition of the queue
        is_queue = need.key == queue_scope(task.queue, "")
        met.append(LimitMet(need.key, label_of(need.key, rules), need.limit, "scope", per if is_queue else None))
    for ceiling in ceilings_met(rules, [task.queue]):
        name = "max_active" if ceiling.queue is None else f"max_active({ceiling.queue})"
        label = "max_active of all queues" if ceiling.queue is None else f"max_active of queue {ceiling.queue}"
        met.append(LimitMet(name, label, ceiling.limit, "admission"))
    max_workers = rules.max_workers(task.queue)
    if max_workers is not None:
        label = f"max_workers of queue {task.queue}, per worker"
        met.append(LimitMet(f"max_workers({task.queue})", label, max_workers, "worker"))
    local = rules.local_limit(task.queue)
    if local is not None:
        label = f"local_limit of queue {task.queue}, per worker"
        met.append(LimitMet(f"local_limit({task.queue})", label, local, "worker", per))
    return met
