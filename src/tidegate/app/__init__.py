"""The user-facing API: App, tasks, submit options and run handles."""

from tidegate.app.app import App
from tidegate.app.handle import RunHandle
from tidegate.app.submit import TaskOptions
from tidegate.app.tasks import Task

__all__ = ["App", "RunHandle", "Task", "TaskOptions"]
