"""tidegate: durable tasks and workflows for Python, with concurrency control you can reason about."""

from tidegate.app import App, RunHandle, Task, TaskOptions
from tidegate.domain.errors import (
    AdmissionRejected,
    ConfigurationError,
    InvalidArgument,
    PoolClaimTimeout,
    PoolRequestTooLarge,
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
from tidegate.workflow import Executor, Step, StepRef, Workflow, WorkflowError

__all__ = [
    "AdmissionRejected",
    "App",
    "Cancelled",
    "Concurrency",
    "ConfigurationError",
    "Context",
    "Executor",
    "InvalidArgument",
    "Partition",
    "PoolClaimTimeout",
    "PoolRequestTooLarge",
    "QueueConfig",
    "RunCanceled",
    "RunFailed",
    "RunHandle",
    "RunNotFound",
    "RunQueueConfig",
    "RunStatus",
    "SchemaError",
    "Step",
    "StepRef",
    "StoreUnavailable",
    "TagConcurrencyLimit",
    "Task",
    "TaskOptions",
    "TidegateError",
    "UnknownTask",
    "WaitTimeout",
    "Worker",
    "Workflow",
    "WorkflowError",
]
