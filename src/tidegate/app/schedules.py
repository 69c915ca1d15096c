"""The schedules an app declares (`app.schedule`), checked at once and stored before its workers start.

A declaration is checked where it is written: the cron expression and time
zone (engine/runtime/cron.py), the missed-ticks policy, and the args, as a submit of
the task would check them, so a schedule can never store a run that its task
refuses. Declarations reach the store when a worker starts (or the app pauses,
resumes or lists its schedules); every worker then fires every stored
schedule, whichever app declared it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

from tidegate.app.tasks import Task
from tidegate.domain.clock import Clock, wall_now
from tidegate.domain.errors import ConfigurationError, InvalidArgument, UnknownTask
from tidegate.domain.schedules import ScheduleDefinition, ScheduleRecord, check_missed, check_schedule_name
from tidegate.engine.operators import schedules as controls
from tidegate.engine.runtime import schedules as engine
from tidegate.engine.runtime.cron import Cron
from tidegate.storage.port import Store


class Schedules:
    """One app's schedule declarations; `lock` is the app's, which also serializes the use of its store."""

    def __init__(self, store: Callable[[], Store], lock: threading.RLock, clock: Clock) -> None:
        self._store = store
        self._lock = lock
        self._clock = clock
        self._declared: dict[str, ScheduleDefinition] = {}
        self._persisted = False

    def schedule(
        self,
        target: Any,
        cron: str | None,
        timezone: Any,
        args: Mapping[str, Any] | None,
        name: str | None,
        missed: Any,
        find_task: Callable[[str], Task | None],
    ) -> Any:
        """`App.schedule`: declare now (`target` a task, or a task's name), or as a decorator
        (`target` the cron expression, `cron` None) that declares the task it decorates."""
        if cron is None:
            if not isinstance(target, str):
                raise ConfigurationError("app.schedule(task, cron=...): the cron expression is missing")

            def decorate(task: Task) -> Task:
                self.declare(task, target, timezone, args, name, missed)
                return task

            return decorate
        task = find_task(target) if isinstance(target, str) else target
        if task is None:
            raise UnknownTask(f"unknown task {target!r}: app.schedule takes a task declared on this app")
        return self.declare(task, cron, timezone, args, name, missed)

    def declare(
        self, task: Any, cron: Any, timezone: Any, args: Mapping[str, Any] | None, name: str | None, missed: Any
    ) -> ScheduleDefinition:
        """Check and keep a schedule of `task` (a `Task` of this app); raises naming what is wrong."""
        if not isinstance(task, Task):
            raise ConfigurationError(
                f"app.schedule needs a task, got {task!r}: put @app.schedule(...) above @app.task, "
                "or call app.schedule(task, cron=...)"
            )
        if args is not None and not isinstance(args, Mapping):
            raise InvalidArgument(f"schedule of {task.name}: args must be a dict, got {type(args).__name__}")
        Cron(cron, timezone)  # a bad expression or zone raises here, naming it
        definition = ScheduleDefinition(
            name=check_schedule_name(task.name if name is None else name),
            task=task.name,
            cron=cron,
            timezone=timezone,
            args=dict(args or {}),
            missed=check_missed(missed),
        )
        task.options().new_runs([definition.args])  # the args as a submit checks them (names, JSON, size)
        with self._lock:
            known = self._declared.get(definition.name)
            if known is not None and known != definition:
                raise ConfigurationError(
                    f"schedule {definition.name!r} is already declared (task {known.task}, {known.cron!r}): "
                    "give each schedule its own name="
                )
            self._declared[definition.name] = definition
            self._persisted = False
        return definition

    def persist(self) -> None:
        """Store new or changed declarations (cursors kept unless the expression or zone changed)."""
        with self._lock:
            if self._persisted or not self._declared:
                return
            now = wall_now(self._clock)
            self._store().register_schedules([engine.declare(d, now) for d in self._declared.values()])
            self._persisted = True

    def set_paused(self, name: str, paused: bool) -> bool:
        self.persist()
        return controls.set_paused(self._store(), check_schedule_name(name), paused, wall_now(self._clock))

    def stored(self) -> list[ScheduleRecord]:
        self.persist()
        return controls.list_schedules(self._store())

    def forget_persisted(self) -> None:
        """The store was closed: the next one (perhaps another database) is told everything again."""
        with self._lock:
            self._persisted = False
