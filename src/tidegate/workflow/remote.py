"""Which remote executor, if any, runs a run's steps outside the worker (Kubernetes Jobs).

The Kubernetes client is imported only here, and only for a workflow whose
executor is `Executor.kubernetes()`: every other workflow never loads it.
"""

from __future__ import annotations

from tidegate.storage.port import Fence, Store
from tidegate.workflow.definitions import WorkflowDefinition
from tidegate.workflow.executors import RemoteSteps


def remote_steps(definition: WorkflowDefinition, store: Store, fence: Fence) -> RemoteSteps | None:
    """The run attempt's remote executor, or None when its steps run in the worker."""
    spec = definition.executor.pods
    if definition.executor.kind != "kubernetes" or spec is None:
        return None
    from tidegate.workflow.kubernetes.jobs import WorkflowTarget, import_path
    from tidegate.workflow.kubernetes.runner import RunJobs

    workflow = WorkflowTarget(import_path(definition.fn), definition.name, definition.builder_param)
    return RunJobs(spec, workflow, store, fence)
