"""tidegate: durable tasks and workflows for Python, with concurrency control you can reason about.

Every type a user passes to or receives from the public API is exported here
(`tests/unit/test_exports.py` walks the signatures to hold that true), so
`tidegate.X` is always enough to annotate code that uses it.
"""

from tidegate.app import App, RunHandle, Task, TaskOptions
from tidegate.app.keywords import StepKeywords, SubmitKeywords, TaskKeywords, WorkflowKeywords
from tidegate.app.steps import WorkflowTask
from tidegate.domain.adaptive import Adaptive, AdaptiveState
from tidegate.domain.attempts import AttemptCount
from tidegate.domain.backpressure import Pace
from tidegate.domain.blocking import QueuedShape
from tidegate.domain.children import ChildRecord, NewChild, TriggerAnswer, TriggerRequest
from tidegate.domain.clock import Clock, ShiftedClock, SystemClock
from tidegate.domain.doctor import DatabaseFacts
from tidegate.domain.errors import (
    AdmissionRejected,
    ArgumentMismatch,
    AttemptFencedOut,
    ConfigurationError,
    InvalidArgument,
    NonDeterministicReplay,
    PoolClaimTimeout,
    PoolNotFound,
    PoolRequestTooLarge,
    QueueNotFound,
    RateCostTooLarge,
    RateNotFound,
    RecursiveWaitDeadlock,
    RunCanceled,
    RunFailed,
    RunNotFound,
    RunNotRetryable,
    ScheduleNotFound,
    SchemaError,
    ServerUnreachable,
    StoreUnavailable,
    TidegateError,
    UnknownTask,
    WaitCycle,
    WaitDeadlock,
    WaitTimeout,
)
from tidegate.domain.keys import CheckedUnique, RunKey
from tidegate.domain.limits import (
    Concurrency,
    Partition,
    QueueConfig,
    RunQueueConfig,
    TagConcurrencyLimit,
    TagRateLimit,
)
from tidegate.domain.model import (
    ClaimedRun,
    CycleRequest,
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
    TaskRegistration,
    WorkerRecord,
    WorkerRegistration,
)
from tidegate.domain.named_rates import NamedRate
from tidegate.domain.parameters import ParameterKind, TaskParameter, TaskParameters
from tidegate.domain.rates import Held, Rate, RateStates
from tidegate.domain.retention import PruneReport
from tidegate.domain.schedules import Firing, NewSchedule, ScheduleDefinition, ScheduleRecord, Tick
from tidegate.domain.scopes import Rules, ScopeNeed
from tidegate.domain.snooze import Snooze
from tidegate.domain.steps import (
    FinishStepRequest,
    PoolConfig,
    PoolStatus,
    PoolWaiter,
    RateWait,
    ScopeUse,
    SlotGrant,
    SlotRequest,
    StepFinish,
    StepRecord,
    StepStatus,
    StepUpdate,
)
from tidegate.domain.unique import Admission, DuplicateRun, Unique
from tidegate.engine.runtime.children import RunsBuilder, Triggerable
from tidegate.engine.runtime.pools import ClaimPolicy
from tidegate.storage.port import Listener, Store
from tidegate.storage.submits import Submits
from tidegate.worker.context import Cancelled, Context
from tidegate.worker.execution import TaskFunction
from tidegate.worker.loop import Worker
from tidegate.worker.settings import WorkerSettings
from tidegate.workflow import Executor, Step, StepRef, Workflow, WorkflowError
from tidegate.workflow.definitions import WorkflowDefinition
from tidegate.workflow.kubernetes.spec import KubernetesSpec

__all__ = [
    "Adaptive",
    "AdaptiveState",
    "Admission",
    "AdmissionRejected",
    "App",
    "ArgumentMismatch",
    "AttemptCount",
    "AttemptFencedOut",
    "Cancelled",
    "CheckedUnique",
    "ChildRecord",
    "ClaimPolicy",
    "ClaimedRun",
    "Clock",
    "Concurrency",
    "ConfigurationError",
    "Context",
    "CycleRequest",
    "CycleResult",
    "DatabaseFacts",
    "DuplicateRun",
    "EventRecord",
    "Executor",
    "FinishStepRequest",
    "Firing",
    "Held",
    "HolderRecord",
    "InvalidArgument",
    "KubernetesSpec",
    "LimitChange",
    "LimitOverride",
    "Listener",
    "NamedRate",
    "NewChild",
    "NewRun",
    "NewSchedule",
    "NonDeterministicReplay",
    "Outcome",
    "OutcomeKind",
    "Pace",
    "ParameterKind",
    "Partition",
    "PoolClaimTimeout",
    "PoolConfig",
    "PoolNotFound",
    "PoolRequestTooLarge",
    "PoolStatus",
    "PoolWaiter",
    "PruneReport",
    "QueueConfig",
    "QueueCounts",
    "QueueNotFound",
    "QueuedShape",
    "Rate",
    "RateCostTooLarge",
    "RateNotFound",
    "RateStates",
    "RateWait",
    "RecursiveWaitDeadlock",
    "Rules",
    "RunCanceled",
    "RunFailed",
    "RunHandle",
    "RunKey",
    "RunNotFound",
    "RunNotRetryable",
    "RunQueueConfig",
    "RunRecord",
    "RunStatus",
    "RunsBuilder",
    "ScheduleDefinition",
    "ScheduleNotFound",
    "ScheduleRecord",
    "SchemaError",
    "ScopeNeed",
    "ScopeUse",
    "ServerUnreachable",
    "ShiftedClock",
    "SlotGrant",
    "SlotRequest",
    "Snooze",
    "Step",
    "StepFinish",
    "StepKeywords",
    "StepRecord",
    "StepRef",
    "StepStatus",
    "StepUpdate",
    "Store",
    "StoreUnavailable",
    "SubmitKeywords",
    "Submits",
    "SweepReport",
    "SystemClock",
    "TagConcurrencyLimit",
    "TagRateLimit",
    "Task",
    "TaskDefinition",
    "TaskFunction",
    "TaskKeywords",
    "TaskOptions",
    "TaskParameter",
    "TaskParameters",
    "TaskRegistration",
    "Tick",
    "TidegateError",
    "TriggerAnswer",
    "TriggerRequest",
    "Triggerable",
    "Unique",
    "UnknownTask",
    "WaitCycle",
    "WaitDeadlock",
    "WaitTimeout",
    "Worker",
    "WorkerRecord",
    "WorkerRegistration",
    "WorkerSettings",
    "Workflow",
    "WorkflowDefinition",
    "WorkflowError",
    "WorkflowKeywords",
    "WorkflowTask",
]
