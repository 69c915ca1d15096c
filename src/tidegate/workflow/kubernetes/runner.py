"""One run attempt's Jobs: start a step try as a Job, follow it, read its output, delete it.

The orchestrator treats a Job like any executor: it claims the step's pools
(and `max_concurrent_steps` slot) first, then awaits `start`. That await ends
with the output the pod wrote to the store (fenced on run, attempt and step),
or raises `JobFailed` with the reason; cancelled (the run is canceled, the
step's slots were lost, the attempt is abandoned) it deletes the Job.

On its first step the attempt lists the run's Jobs: those of earlier
attempts are deleted (their pods' writes are fenced out anyway), a running
Job of this very attempt is adopted by its step instead of starting another.
When the attempt ends, every Job it labelled is deleted: no Job outlives its run.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tidegate.domain.steps import StepUpdate
from tidegate.engine.runtime.pod_steps import pod_output
from tidegate.storage.port import Fence, Store
from tidegate.workflow.kubernetes.cluster import Cluster, Obj, cluster_for
from tidegate.workflow.kubernetes.jobs import (
    ANNOTATION_STEP_KEY,
    LABEL_ATTEMPT,
    LABEL_RUN,
    JobRef,
    StepTarget,
    WorkflowTarget,
    import_path,
    job_manifest,
    run_label,
    run_selector,
)
from tidegate.workflow.kubernetes.judge import Outcome, job_outcome, pod_outcome
from tidegate.workflow.kubernetes.spec import KubernetesSpec
from tidegate.workflow.kubernetes.watcher import Watcher

log = logging.getLogger(__name__)

JOB_NAME_LABELS = ("batch.kubernetes.io/job-name", "job-name")  # set on a Job's pods by the Job controller


class JobFailed(Exception):
    """A step try's Job failed, or its pod could not run; the message says which and why."""


@dataclass(eq=False)
class _Try:
    step: StepUpdate
    done: asyncio.Future[Outcome]
    pod: str | None = None
    deleting: bool = False


@dataclass
class _Seen:
    """The run's Jobs and pods as last seen, and since when each is known (monotonic)."""

    jobs: dict[str, Obj] = field(default_factory=dict)
    pods: dict[str, Obj] = field(default_factory=dict)  # by pod name
    since: dict[str, float] = field(default_factory=dict)

    def remember(self, known: dict[str, Obj], name: str, obj: Obj) -> None:
        known[name] = obj
        self.since.setdefault(name, time.monotonic())


class RunJobs:
    """The `RemoteSteps` of one run attempt on Kubernetes."""

    def __init__(self, spec: KubernetesSpec, workflow: WorkflowTarget, store: Store, fence: Fence) -> None:
        self._spec = spec
        self._workflow = workflow
        self._store = store
        self._fence = fence
        self._cluster: Cluster | None = None
        self._opening: asyncio.Future[None] | None = None
        self._watcher: Watcher | None = None
        self._tries: dict[str, int] = {}  # step key -> tries started by this attempt
        self._waiting: dict[str, _Try] = {}  # Job name -> the try awaiting it
        self._adoptable: dict[str, str] = {}  # step key -> a live Job of this attempt found at open
        self._seen = _Seen()
        self._deletions: set[asyncio.Task[None]] = set()

    # --- the run's Jobs --------------------------------------------------------------

    async def _open(self) -> Cluster:
        """Load the client, clean up after earlier attempts, start following the run (once)."""
        if self._opening is None:
            self._opening = asyncio.ensure_future(self._open_now())
        await asyncio.shield(self._opening)
        assert self._cluster is not None
        return self._cluster

    async def _open_now(self) -> None:
        self._cluster = cluster = await asyncio.to_thread(cluster_for, self._spec)
        jobs, _ = await asyncio.to_thread(cluster.list, "job", run_selector(self._fence[0]))
        for job in self._of_run(jobs):
            attempt = _attempt_of(job)
            name = job["metadata"]["name"]
            if attempt is not None and attempt > self._fence[1]:
                continue  # a later attempt owns the run: not ours to touch
            if attempt == self._fence[1] and job_outcome(job) is None:
                step_key = (job["metadata"].get("annotations") or {}).get(ANNOTATION_STEP_KEY)
                if step_key:
                    self._adoptable[step_key] = name
                    continue
            log.info("run %s attempt %s: deleting Job %s left by attempt %s", *self._fence, name, attempt)
            await asyncio.to_thread(cluster.delete_job, name)
        loop = asyncio.get_running_loop()
        self._watcher = Watcher(
            cluster,
            run_selector(self._fence[0]),
            loop,
            self._on_event,
            self._on_listed,
            self._spec.watch_seconds,
            self._spec.poll_seconds,
        )
        self._watcher.start()

    def _of_run(self, objects: list[Obj]) -> list[Obj]:
        """Objects labelled with this run (a server may ignore the label selector; this does not)."""
        label = run_label(self._fence[0])
        return [obj for obj in objects if ((obj.get("metadata") or {}).get("labels") or {}).get(LABEL_RUN) == label]

    async def close(self) -> None:
        """Stop following and delete every Job this attempt labelled (a canceled run's included)."""
        if self._opening is None:
            return
        with _suppressed("opening"):
            await self._opening
        if self._watcher is not None:
            self._watcher.stop()
        if self._cluster is None:
            return
        cluster = self._cluster
        with _suppressed("listing Jobs to delete"):
            jobs, _ = await asyncio.to_thread(cluster.list, "job", run_selector(self._fence[0]))
            for job in self._of_run(jobs):
                if _attempt_of(job) == self._fence[1]:
                    await asyncio.to_thread(cluster.delete_job, job["metadata"]["name"])
        if self._deletions:
            await asyncio.wait(self._deletions)

    # --- one step try ----------------------------------------------------------------

    async def start(self, step: StepUpdate, fn: Callable[..., Any]) -> Any:
        cluster = await self._open()
        key = step.step_key
        tries = self._tries[key] = self._tries.get(key, 0) + 1
        name = self._adoptable.pop(key, None)
        if name is None:
            ref = JobRef(self._fence[0], self._fence[1], key, tries)
            target = StepTarget(
                workflow=self._workflow.path,
                workflow_name=self._workflow.name,
                builder_param=self._workflow.builder_param,
                function=import_path(fn),
            )
            name = ref.name
            await self._create(cluster, name, job_manifest(self._spec, ref, target))
        else:
            log.info("run %s attempt %s: step %s adopts its running Job %s", *self._fence, key, name)
        try:
            return await self._outcome(cluster, step, name)
        finally:
            # Done, failed, or stopped (canceled, its pool slots lost): its Job goes, its pod stops.
            self._delete_later(name)

    async def _create(self, cluster: Cluster, name: str, manifest: Obj) -> None:
        """Create the Job; stopped meanwhile, delete it once created (it must not run unclaimed)."""
        creating = asyncio.ensure_future(asyncio.to_thread(cluster.create_job, manifest))
        try:
            created = await asyncio.shield(creating)
        except asyncio.CancelledError:
            creating.add_done_callback(lambda _: self._delete_later(name))
            raise
        if created is not None and name not in self._seen.jobs:
            self._seen.remember(self._seen.jobs, name, created)

    async def _outcome(self, cluster: Cluster, step: StepUpdate, name: str) -> Any:
        """Wait for the Job's verdict; its output, or JobFailed with the reason and the pod's name."""
        waiting = self._waiting[name] = _Try(step, asyncio.get_running_loop().create_future())
        self._judge(name)
        try:
            outcome = await asyncio.shield(waiting.done)
        finally:
            self._waiting.pop(name, None)
        if outcome.succeeded:
            return await asyncio.to_thread(self._read_output, step, name)
        pod = await self._pod_of(cluster, name)
        reason = outcome.reason
        told = None if pod is None else pod_outcome(pod)
        if told is not None and told.reason not in reason:
            reason = f"{reason}; its pod: {told.reason}"  # why the pod failed (evicted, ...), not just that it did
        pod_name = waiting.pod if pod is None else pod["metadata"]["name"]
        where = f"Job {name}" + (f" (pod {pod_name})" if pod_name else "")
        raise JobFailed(f"{where}: {reason}")

    async def _pod_of(self, cluster: Cluster, job_name: str) -> Obj | None:
        """A failed Job's pod as it is now: the pod watch may lag the Job's (they are separate)."""
        with _suppressed(f"listing the pods of Job {job_name}"):
            pods, _ = await asyncio.to_thread(cluster.list, "pod", run_selector(self._fence[0]))
            for pod in self._of_run(pods):
                if _job_of(pod) == job_name:
                    return pod
        return None

    def _read_output(self, step: StepUpdate, name: str) -> Any:
        """The output the pod wrote for this attempt (a running row holding {job, pod, output})."""
        for record in self._store.run_steps(self._fence[0]):
            if record.step_key != step.step_key:
                continue
            found, output = pod_output(record, self._fence[1], name)
            if found:
                return output
            break
        raise JobFailed(f"Job {name} succeeded but its step's output is not in the store for this attempt")

    def _delete_later(self, name: str) -> None:
        cluster = self._cluster
        if cluster is None:
            return

        async def delete() -> None:
            with _suppressed(f"deleting Job {name}"):
                await asyncio.to_thread(cluster.delete_job, name)

        task = asyncio.ensure_future(delete())
        self._deletions.add(task)
        task.add_done_callback(self._deletions.discard)

    # --- what the watch says ---------------------------------------------------------

    def _on_listed(self, kind: str, objects: list[Obj], asked: float) -> None:
        """A full list: what it lacks is gone, unless this worker learned of it after the list was
        asked for (a Job created meanwhile is not in a list answered before it existed)."""
        objects = self._of_run(objects)
        names = {obj["metadata"]["name"] for obj in objects}
        known = self._seen.jobs if kind == "job" else self._seen.pods
        for gone in [name for name in known if name not in names and self._seen.since.get(name, 0.0) < asked]:
            self._on_event(kind, "DELETED", known[gone])
        for obj in objects:
            self._on_event(kind, "MODIFIED", obj)

    def _on_event(self, kind: str, event_type: str, obj: Obj) -> None:
        if not self._of_run([obj]):
            return
        name = obj["metadata"]["name"]
        known = self._seen.jobs if kind == "job" else self._seen.pods
        job_name = name if kind == "job" else _job_of(obj)
        if event_type == "DELETED":
            known.pop(name, None)
            self._seen.since.pop(name, None)
        else:
            self._seen.remember(known, name, obj)
        if event_type == "DELETED" and kind == "job" and job_name in self._waiting:
            self._settle(job_name, Outcome(False, "its Job was deleted while it ran"))
            return
        self._judge(job_name)

    def _judge(self, job_name: str) -> None:
        waiting = self._waiting.get(job_name)
        if waiting is None or waiting.done.done():
            return
        for pod in self._seen.pods.values():
            if _job_of(pod) == job_name:
                waiting.pod = pod["metadata"]["name"]
                outcome = pod_outcome(pod)
                if outcome is not None:
                    self._settle(job_name, outcome)
                    return
        job = self._seen.jobs.get(job_name)
        if job is not None:
            outcome = job_outcome(job)
            if outcome is not None:
                self._settle(job_name, outcome)

    def _settle(self, job_name: str, outcome: Outcome) -> None:
        waiting = self._waiting.get(job_name)
        if waiting is not None and not waiting.done.done():
            waiting.done.set_result(outcome)


def _job_of(pod: Obj) -> str:
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return next((str(labels[label]) for label in JOB_NAME_LABELS if label in labels), "")


def _attempt_of(job: Obj) -> int | None:
    value = ((job.get("metadata") or {}).get("labels") or {}).get(LABEL_ATTEMPT, "")
    return int(value) if value.isdigit() else None


class _suppressed:
    """Log and swallow an API error while cleaning up: the rest of the clean-up still runs."""

    def __init__(self, what: str) -> None:
        self._what = what

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: Any) -> bool:
        if error is None or not isinstance(error, Exception):
            return False
        log.warning("kubernetes executor: %s failed: %s", self._what, error)
        return True
