"""Workflows: a run made of steps, with executors, fan-out windows and pool claims.

Between the worker (which claims a workflow run and executes it as an async
attempt on its loop) and the engine (the PoolGuard): this package builds the
DAG, decides which steps are ready and runs them under the run's caps.
"""

from tidegate.workflow.builder import StepRef, Workflow
from tidegate.workflow.definitions import Step, WorkflowDefinition
from tidegate.workflow.errors import StepError, WorkflowError
from tidegate.workflow.executors import Executor
from tidegate.workflow.orchestrator import RunScope, execute_workflow

__all__ = [
    "Executor",
    "RunScope",
    "Step",
    "StepError",
    "StepRef",
    "Workflow",
    "WorkflowDefinition",
    "WorkflowError",
    "execute_workflow",
]
