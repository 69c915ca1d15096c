"""tidegate: durable tasks and workflows for Python, with concurrency control you can reason about."""

from tidegate.app import App, RunHandle, Task, TaskOptions
from tidegate.domain.errors import (
    AdmissionRejected,
    ConfigurationError,
    InvalidArgument,
    RunCanceled,
    RunFailed,
    RunNotFound,
    SchemaError,
    StoreUnavailable,
    TidegateError,
    UnknownTask,
    WaitTimeout,
)
from tidegate.domain.limits import Concurrency, Partition, QueueConfig, RunQueueConfig, TagConcurrencyLimit
from tidegate.domain.model import RunStatus
from tidegate.worker.context import Cancelled, Context
from tidegate.worker.runner import Worker

__all__ = [
    "AdmissionRejected",
    "App",
    "Cancelled",
    "Concurrency",
    "ConfigurationError",
    "Context",
    "InvalidArgument",
    "Partition",
    "QueueConfig",
    "RunCanceled",
    "RunFailed",
    "RunHandle",
    "RunNotFound",
    "RunQueueConfig",
    "RunStatus",
    "SchemaError",
    "StoreUnavailable",
    "TagConcurrencyLimit",
    "Task",
    "TaskOptions",
    "TidegateError",
    "UnknownTask",
    "WaitTimeout",
    "Worker",
]
