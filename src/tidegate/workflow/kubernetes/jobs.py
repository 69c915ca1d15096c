"""A step try's Job: its name, its labels and its manifest (pure: no client, no I/O).

Step keys (`fetch[12]`) and run ids are not valid Kubernetes names, so names
and label values carry short hashes; the readable step key is an annotation.
Labels say which run, step and run attempt a Job belongs to: what a later
attempt selects on to adopt or delete what a dead worker left behind.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any

from tidegate.storage.urls import DATABASE_ENV
from tidegate.workflow.kubernetes.spec import JOB_ENV, POD_ENV, KubernetesSpec

LABEL_RUN = "tidegate.dev/run"
LABEL_STEP = "tidegate.dev/step"
LABEL_ATTEMPT = "tidegate.dev/attempt"
LABEL_TRY = "tidegate.dev/try"
ANNOTATION_STEP_KEY = "tidegate.dev/step-key"
CONTAINER = "step"
POD_ENTRY = "tidegate.steppod"
FINISHED_JOB_TTL = 3600  # seconds the cluster keeps a finished Job that tidegate did not delete
_LABEL_VALUE = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")


def _digest(text: str, length: int) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:length]


def run_label(run_id: str) -> str:
    """The run's label value: its id when that is a valid label value, else a hash of it."""
    return run_id if _LABEL_VALUE.fullmatch(run_id) else "h-" + _digest(run_id, 40)


def step_label(step_key: str) -> str:
    return _digest(step_key, 20)


def run_selector(run_id: str) -> str:
    return f"{LABEL_RUN}={run_label(run_id)}"


@dataclass(frozen=True)
class JobRef:
    """Which step try a Job runs: run, run attempt, step key, and the step's try within the attempt."""

    run_id: str
    attempt: int
    step_key: str
    try_number: int

    @property
    def name(self) -> str:
        return f"tg-{_digest(self.run_id, 10)}-{step_label(self.step_key)[:12]}-{self.attempt}-{self.try_number}"

    def labels(self) -> dict[str, str]:
        return {
            LABEL_RUN: run_label(self.run_id),
            LABEL_STEP: step_label(self.step_key),
            LABEL_ATTEMPT: str(self.attempt),
            LABEL_TRY: str(self.try_number),
        }


@dataclass(frozen=True)
class WorkflowTarget:
    """The workflow a pod imports to rebuild the run's DAG (hence its step's inputs)."""

    path: str  # module:qualname of the workflow function
    name: str
    builder_param: str


@dataclass(frozen=True)
class StepTarget:
    """What the pod imports: the workflow (to rebuild its DAG, hence the step's inputs) and the step's function."""

    workflow: str  # module:qualname of the workflow function
    workflow_name: str
    builder_param: str
    function: str  # module:qualname of the step function


def import_path(fn: Any) -> str:
    """`module:qualname` of a function the pod can import (not a lambda, not a nested function)."""
    fn = getattr(fn, "__wrapped__", fn)
    module, qualname = getattr(fn, "__module__", None), getattr(fn, "__qualname__", "")
    if not module or not qualname or "<" in qualname:
        raise ValueError(
            f"{fn!r} cannot run on Kubernetes: its pod imports it by module path, so it must be a module-level function"
        )
    return f"{module}:{qualname}"


def job_manifest(spec: KubernetesSpec, ref: JobRef, target: StepTarget) -> dict[str, Any]:
    """The Job of one step try. No retries of its own (backoffLimit 0: tidegate retries per the
    step's policy); the database URL comes from the user's Secret, never from this manifest."""
    labels = ref.labels()
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": spec.image,
        # A step that raises exits 1 after printing its traceback: its last line (the error) becomes
        # the container's termination message, which the step's failure reason quotes.
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "command": ["python", "-m", POD_ENTRY],
        "args": [
            "--run",
            ref.run_id,
            "--attempt",
            str(ref.attempt),
            "--step",
            ref.step_key,
            "--workflow",
            target.workflow,
            "--workflow-name",
            target.workflow_name,
            "--builder",
            target.builder_param,
            "--function",
            target.function,
        ],
        "env": [
            {
                "name": DATABASE_ENV,
                "valueFrom": {"secretKeyRef": {"name": spec.store_secret, "key": spec.store_secret_key}},
            },
            {"name": JOB_ENV, "value": ref.name},
            {"name": POD_ENV, "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            *({"name": key, "value": value} for key, value in sorted(spec.env.items())),
        ],
    }
    if spec.resources:
        container["resources"] = {"requests": dict(spec.resources), "limits": dict(spec.resources)}
    if spec.image_pull_policy is not None:
        container["imagePullPolicy"] = spec.image_pull_policy
    pod_spec: dict[str, Any] = {"restartPolicy": "Never", "containers": [container]}
    if spec.service_account is not None:
        pod_spec["serviceAccountName"] = spec.service_account
    job_spec: dict[str, Any] = {
        "backoffLimit": 0,
        # A safety net only: tidegate deletes each Job once its step try is over, but a Job whose
        # worker died and whose run never runs again (canceled meanwhile) is removed by the cluster.
        "ttlSecondsAfterFinished": FINISHED_JOB_TTL,
        "template": {"metadata": {"labels": labels}, "spec": pod_spec},
    }
    if spec.active_deadline_seconds is not None:
        job_spec["activeDeadlineSeconds"] = spec.active_deadline_seconds
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": ref.name,
            "namespace": spec.namespace,
            "labels": labels,
            "annotations": {ANNOTATION_STEP_KEY: ref.step_key},
        },
        "spec": job_spec,
    }
