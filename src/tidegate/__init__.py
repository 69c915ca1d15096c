"""tidegate: durable tasks and workflows for Python, with concurrency control you can reason about.

Every type a user passes to or receives from the public API is exported here
(`tests/unit/test_exports.py` walks the signatures to hold that true), so
`tidegate.X` is always enough to annotate code that uses it.
"""

from tidegate.app import App, RunHandle, Task, TaskOptions
from tidegate.app.steps import WorkflowTask
from tidegate.domain.clock import Clock, ShiftedClock, SystemClock
from tidegate.domain.errors import (
    AdmissionRejected,
    ConfigurationError,
    InvalidArgument,
    PoolClaimTimeout,
    PoolNotFound,
    PoolRequestTooLarge,
    QueueNotFound,
    RunCanceled,
    RunFailed,
    RunNotFound,
    RunNotRetryable,
    SchemaError,
    StoreUnavailable,
    TidegateError,
    UnknownTask,
    WaitTimeout,
)
from tidegate.domain.limits import Concurrency, Partition, QueueConfig, RunQueueConfig, TagConcurrencyLimit
from tidegate.domain.model import (
    ClaimedRun,
    CycleResult,
    EventRecord,
    HolderRecord,
    LimitChange,
    LimitOverride,
    NewRun,
    Outcome,
    OutcomeKind,
    QueueCounts,
    RunRecord,
    RunStatus,
    SweepReport,
    TaskDefinition,
    WorkerRecord,
)
from tidegate.domain.scopes import Rules, ScopeNeed
from tidegate.domain.steps import (
    PoolConfig,
    PoolStatus,
    ScopeUse,
    SlotGrant,
    SlotRequest,
    StepFinish,
    StepRecord,
    StepStatus,
    StepUpdate,
)
from tidegate.engine.pools import ClaimPolicy
from tidegate.storage.port import Listener, Store
from tidegate.worker.context import Cancelled, Context
from tidegate.worker.execution import TaskFunction
from tidegate.worker.loop import Worker
from tidegate.worker.settings import WorkerSettings
from tidegate.workflow import Executor, Step, StepRef, Workflow, WorkflowError
from tidegate.workflow.definitions import WorkflowDefinition

__all__ = [
    "AdmissionRejected",
    "App",
    "Cancelled",
    "ClaimPolicy",
    "ClaimedRun",
    "Clock",
    "Concurrency",
    "ConfigurationError",
    "Context",
    "CycleResult",
    "EventRecord",
    "Executor",
    "HolderRecord",
    "InvalidArgument",
    "LimitChange",
    "LimitOverride",
    "Listener",
    "NewRun",
    "Outcome",
    "OutcomeKind",
    "Partition",
    "PoolClaimTimeout",
    "PoolConfig",
    "PoolNotFound",
    "PoolRequestTooLarge",
    "PoolStatus",
    "QueueConfig",
    "QueueCounts",
    "QueueNotFound",
    "Rules",
    "RunCanceled",
    "RunFailed",
    "RunHandle",
    "RunNotFound",
    "RunNotRetryable",
    "RunQueueConfig",
    "RunRecord",
    "RunStatus",
    "SchemaError",
    "ScopeNeed",
    "ScopeUse",
    "ShiftedClock",
    "SlotGrant",
    "SlotRequest",
    "Step",
    "StepFinish",
    "StepRecord",
    "StepRef",
    "StepStatus",
    "StepUpdate",
    "Store",
    "StoreUnavailable",
    "SweepReport",
    "SystemClock",
    "TagConcurrencyLimit",
    "Task",
    "TaskDefinition",
    "TaskFunction",
    "TaskOptions",
    "TidegateError",
    "UnknownTask",
    "WaitTimeout",
    "Worker",
    "WorkerRecord",
    "WorkerSettings",
    "Workflow",
    "WorkflowDefinition",
    "WorkflowError",
    "WorkflowTask",
]
