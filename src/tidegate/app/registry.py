"""What an app declares (tasks and queues) and its registration in the store.

Declarations are kept here first, so defining tasks costs nothing; they are
written to the store before the first submit or worker (`persist`), so other
processes and the CLI see the same task defaults and limits.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Generic, Protocol, TypeVar

from tidegate.domain.errors import InvalidArgument
from tidegate.domain.limits import QueueConfig, RunQueueConfig
from tidegate.domain.model import TaskDefinition
from tidegate.storage.port import Store
from tidegate.worker.execution import TaskFunction


class Registered(Protocol):
    """A declared task as the registry needs it (`tidegate.Task` is one)."""

    @property
    def definition(self) -> TaskDefinition: ...

    @property
    def function(self) -> TaskFunction: ...


T = TypeVar("T", bound=Registered)


class Registry(Generic[T]):
    """Tasks and queues declared by one app; `lock` is the app's, which also serializes the use of its store."""

    def __init__(self, store: Callable[[], Store], lock: threading.RLock, run_queue: RunQueueConfig | None) -> None:
        self._store = store
        self._lock = lock
        self.run_queue = run_queue
        self._tasks: dict[str, T] = {}
        self._queues: dict[str, QueueConfig] = {}
        self._undeclared: dict[str, QueueConfig] = {}  # queues only tasks name: their defaults, built once
        self._registered: set[str] = set()  # task names whose definition the store has
        self._limits_registered = False

    def add(self, task: T) -> T:
        with self._lock:
            self._tasks[task.definition.name] = task
            self._registered.discard(task.definition.name)
        return task

    def get(self, name: str) -> T | None:
        return self._tasks.get(name)

    def tasks(self) -> dict[str, T]:
        return dict(self._tasks)

    def declare_queue(self, config: QueueConfig) -> None:
        with self._lock:
            self._queues[config.name] = config
            self._undeclared.pop(config.name, None)
            self._limits_registered = False

    def queue_config(self, name: str) -> QueueConfig:
        """The declaration of a queue: from this app, else as registered in the store by another."""
        known = self._queues.get(name) or self._undeclared.get(name)
        if known is not None:
            return known
        if any(task.definition.queue == name for task in self._tasks.values()):
            return self._undeclared.setdefault(name, QueueConfig(name))
        known = self._store().rules().queues.get(name)
        if known is None:
            raise InvalidArgument(
                f"unknown queue {name!r}: declare it with app.queue({name!r}, ...) or use it in a task"
            )
        return known

    def task_queues(self) -> tuple[str, ...]:
        """Every queue a declared task uses (what a worker serves unless told otherwise)."""
        return tuple(sorted({task.definition.queue for task in self._tasks.values()}))

    def functions(self) -> dict[str, TaskFunction]:
        """The callables a worker executes, by task name, each with the exception types the declared
        adaptive queues and adaptive rates count as overload (`Adaptive.overloaded_by`: code, never stored)."""
        declared = {
            name: [adaptive for adaptive in (config.adaptive, *(rate.adaptive for rate in config.rate)) if adaptive]
            for name, config in self._queues.items()
        }
        overloaded_by = {
            name: tuple(dict.fromkeys(kind for adaptive in found for kind in adaptive.overloaded_by))
            for name, found in declared.items()
            if any(adaptive.overloaded_by for adaptive in found)
        }
        if not overloaded_by:
            return {name: task.function for name, task in self._tasks.items()}
        return {name: replace(task.function, overloaded_by=overloaded_by) for name, task in self._tasks.items()}

    def persist(self, worker_id: str | None = None) -> None:
        """Write new task defaults and changed limit declarations to the store.

        A worker (`worker_id`) registers every task again, so the store says which worker
        last registered each task and when (`tidegate tasks list`).
        """
        with self._lock:
            if worker_id is None and self._limits_registered and len(self._registered) == len(self._tasks):
                return  # all written already (`_registered` holds only names of `_tasks`): every submit asks
            store = self._store()
            new = [
                task.definition
                for name, task in self._tasks.items()
                if worker_id is not None or name not in self._registered
            ]
            if new:
                store.register_tasks(new, worker_id)
                self._registered.update(definition.name for definition in new)
            if new or not self._limits_registered:
                implied = sorted({task.definition.queue for task in self._tasks.values()} - set(self._queues))
                store.register_limits(self.run_queue, list(self._queues.values()), implied)
                self._limits_registered = True

    def pending(self) -> bool:
        """Whether `persist` has anything to write."""
        with self._lock:
            return not self._limits_registered or any(name not in self._registered for name in self._tasks)

    def forget_persisted(self) -> None:
        """The store was closed: the next one (perhaps another database) is told everything again."""
        with self._lock:
            self._registered.clear()
            self._limits_registered = False
