"""The Kubernetes executor's parts without a server: the Job manifest, the status judge, the watch's
resume and re-list on 410 Gone, and what an attempt does with the Jobs it finds (adopt, delete, leave)."""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tidegate import Executor
from tidegate.domain.errors import ConfigurationError
from tidegate.domain.steps import StepRecord, StepStatus, StepUpdate
from tidegate.workflow.kubernetes import runner as runner_module
from tidegate.workflow.kubernetes.cluster import ResourceGone
from tidegate.workflow.kubernetes.jobs import (
    ANNOTATION_STEP_KEY,
    LABEL_ATTEMPT,
    LABEL_RUN,
    LABEL_STEP,
    JobRef,
    StepTarget,
    WorkflowTarget,
    job_manifest,
    run_label,
)
from tidegate.workflow.kubernetes.judge import job_outcome, pod_outcome
from tidegate.workflow.kubernetes.runner import JobFailed, RunJobs
from tidegate.workflow.kubernetes.watcher import Watcher

RUN = "01JTESTRUN0000000000000000"
SPEC = Executor.kubernetes(
    "img:1",
    store_secret="store",
    namespace="batch",
    resources={"cpu": "1"},
    service_account="etl",
    active_deadline_seconds=600,
).pods
TARGET = StepTarget("flows:wf", "wf", "wf", "flows:step")


def test_the_job_reads_the_store_url_from_the_secret_and_is_labelled_with_run_step_and_attempt():
    assert SPEC is not None
    manifest = job_manifest(SPEC, JobRef(RUN, 3, "heavy_query[12]", 2), TARGET)
    name = manifest["metadata"]["name"]
    assert len(name) <= 63 and re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name)
    labels = manifest["metadata"]["labels"]
    assert labels[LABEL_RUN] == RUN and labels[LABEL_ATTEMPT] == "3" and labels[LABEL_STEP]
    assert manifest["spec"]["template"]["metadata"]["labels"] == labels  # the pods carry them too
    assert manifest["metadata"]["annotations"][ANNOTATION_STEP_KEY] == "heavy_query[12]"
    container = manifest["spec"]["template"]["spec"]["containers"][0]
    database = next(e for e in container["env"] if e["name"] == "TIDEGATE_DATABASE")
    assert database == {"name": "TIDEGATE_DATABASE", "valueFrom": {"secretKeyRef": {"name": "store", "key": "url"}}}
    assert "--run" in container["args"] and "heavy_query[12]" in container["args"]
    assert manifest["spec"]["backoffLimit"] == 0  # tidegate retries, per the step's policy
    assert manifest["spec"]["activeDeadlineSeconds"] == 600
    assert container["resources"] == {"requests": {"cpu": "1"}, "limits": {"cpu": "1"}}
    assert manifest["spec"]["template"]["spec"]["serviceAccountName"] == "etl"
    assert "sqlite" not in json.dumps(manifest) and "postgres" not in json.dumps(manifest)


def test_the_executor_compares_and_hashes_by_value_and_needs_no_cluster_to_declare():
    def declared() -> Executor:
        return Executor.kubernetes("img:1", store_secret="store", resources={"cpu": "1"}, max_concurrent_steps=3)

    assert declared() == declared() and hash(declared()) == hash(declared())
    assert repr(declared()) == "Executor.kubernetes(image='img:1', namespace='default', max_concurrent_steps=3)"


def test_a_run_id_that_is_no_label_value_is_hashed():
    assert run_label(RUN) == RUN
    assert re.fullmatch(r"h-[0-9a-f]{40}", run_label("run/with:odd chars"))
    assert re.fullmatch(r"h-[0-9a-f]{40}", run_label(RUN + "\n"))  # `$` would let a trailing newline pass


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max_concurrent_steps": 0}, "max_concurrent_steps"),
        ({"namespace": "Not_A_Name"}, "namespace"),
        ({"namespace": "default\n"}, "namespace"),  # `$` would let a trailing newline pass
        ({"active_deadline_seconds": 0}, "active_deadline_seconds"),
        ({"resources": {"cpu": 1}}, "resources"),
        # a plain-text URL would win over the Secret's and be readable by anyone who can get Jobs
        ({"env": {"TIDEGATE_DATABASE": "postgresql://u:secret@db/x"}}, "env may not set TIDEGATE_DATABASE"),
        ({"env": {"LOG": "1", "TIDEGATE_K8S_POD": "p", "TIDEGATE_K8S_JOB": "j"}}, "TIDEGATE_K8S_JOB, TIDEGATE_K8S_POD"),
    ],
)
def test_bad_executor_options_are_refused_when_declared(options, message):
    with pytest.raises(ConfigurationError, match=message):
        Executor.kubernetes("img:1", store_secret="store", **options)


def test_the_judge_reads_job_and_pod_status_as_outcomes():
    assert job_outcome({"status": {"active": 1}}) is None
    assert job_outcome({"status": {"conditions": [{"type": "Complete", "status": "True"}]}}).succeeded
    deadline = {"type": "Failed", "status": "True", "reason": "DeadlineExceeded", "message": "Job was active longer"}
    failed = job_outcome({"status": {"conditions": [deadline]}})
    assert not failed.succeeded and failed.reason == "DeadlineExceeded: Job was active longer"

    def waiting(reason: str) -> dict[str, Any]:
        state = {"waiting": {"reason": reason, "message": "pull access denied"}}
        return {"status": {"phase": "Pending", "containerStatuses": [{"state": state}]}}

    assert pod_outcome(waiting("ErrImagePull")) is None  # the kubelet pulls again first
    assert pod_outcome(waiting("ContainerCreating")) is None
    assert pod_outcome(waiting("ImagePullBackOff")).reason == "ImagePullBackOff: pull access denied"
    evicted = {"status": {"phase": "Failed", "reason": "Evicted", "message": "The node was low on memory."}}
    assert pod_outcome(evicted).reason == "Evicted: The node was low on memory."
    assert pod_outcome({"status": {"phase": "Running"}}) is None
    raised = {"exitCode": 1, "reason": "Error", "message": "Traceback ...\n  ...\nValueError: bad day\n"}
    crashed = {"status": {"phase": "Failed", "containerStatuses": [{"state": {"terminated": raised}}]}}
    assert pod_outcome(crashed).reason == "Error: exit code 1: ValueError: bad day"


class ScriptedCluster:
    """Serves lists with resource versions and watches that end or answer 410, recording the calls."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, ...]] = []
        self.versions = iter(["10", "20", "30"])
        self.done = threading.Event()
        self.release = threading.Event()
        self.jobs: list[dict[str, Any]] = []
        self.deleted: list[str] = []
        self.created: list[str] = []

    def list(self, kind: str, selector: str) -> tuple[list[dict[str, Any]], str | None]:
        self.calls.append(("list", kind))
        return (self.jobs if kind == "job" else []), next(self.versions, "99")

    def watch(
        self, kind: str, selector: str, version: str | None, seconds: int, opened: Any
    ) -> Iterator[tuple[str, Any]]:
        self.calls.append(("watch", kind, str(version)))
        if version == "10":
            yield "MODIFIED", {"metadata": {"name": "j", "resourceVersion": "15", "labels": {}}}
            return  # the request ended: resume from 15, no re-list
        if version == "15":
            raise ResourceGone("too old resource version")
        self.done.set()
        self.release.wait(10)  # a watch request open until the test is done

    def delete_job(self, name: str) -> bool:
        self.deleted.append(name)
        return True

    def create_job(self, manifest: dict[str, Any]) -> dict[str, Any]:
        self.created.append(manifest["metadata"]["name"])
        return manifest


def test_a_watch_resumes_from_its_last_resource_version_and_lists_again_on_410_gone():
    cluster = ScriptedCluster()
    loop = asyncio.new_event_loop()
    try:
        watcher = Watcher(cluster, "sel", loop, lambda *a: None, lambda *a: None, 5, 3600)  # type: ignore[arg-type]
        thread = threading.Thread(target=watcher._follow, args=("job",), daemon=True)
        thread.start()
        assert cluster.done.wait(10)
        watcher.stop()
        cluster.release.set()
        thread.join(10)
    finally:
        loop.close()
    assert cluster.calls == [
        ("list", "job"),
        ("watch", "job", "10"),
        ("watch", "job", "15"),  # resumed where the last request ended
        ("list", "job"),  # 410 Gone: list again ...
        ("watch", "job", "20"),  # ... and watch from the new list's version
    ]


def _job(name: str, attempt: int, step_key: str, finished: bool = False) -> dict[str, Any]:
    status = {"conditions": [{"type": "Complete", "status": "True"}]} if finished else {"active": 1}
    labels = {LABEL_RUN: RUN, LABEL_ATTEMPT: str(attempt)}
    return {
        "metadata": {"name": name, "labels": labels, "annotations": {ANNOTATION_STEP_KEY: step_key}},
        "status": status,
    }


UNTIL = 30.0  # seconds: generous, it only catches a hang


async def until(condition: Any, message: str) -> None:
    """Let the attempt's tasks and threads run until `condition()` holds (not for a fixed time, which
    a stalled machine outlasts); fail after UNTIL seconds."""
    deadline = time.monotonic() + UNTIL
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {UNTIL:g}s waiting for {message}")
        await asyncio.sleep(0.01)


class OneStepStore:
    def __init__(self, output: Any) -> None:
        self.output = output

    def run_steps(self, run_id: str) -> list[StepRecord]:
        return [StepRecord(run_id, "a", None, None, StepStatus.RUNNING, self.output, None, 2, None, None)]


def test_an_attempt_deletes_earlier_attempts_jobs_and_adopts_its_own_running_job(monkeypatch):
    cluster = ScriptedCluster()
    cluster.jobs = [
        _job("stale", 1, "a"),  # a dead worker's attempt: deleted
        _job("mine", 2, "a"),  # this attempt's, still running: adopted by step a
        _job("mine-done", 2, "b", finished=True),  # this attempt's, finished: deleted
        _job("later", 3, "a"),  # a later attempt owns the run: left alone
        {"metadata": {"name": "other-run", "labels": {LABEL_RUN: "x", LABEL_ATTEMPT: "1"}}},  # not this run's
    ]
    monkeypatch.setattr(runner_module, "cluster_for", lambda spec: cluster)
    monkeypatch.setattr(Watcher, "start", lambda self: None)
    assert SPEC is not None
    store = OneStepStore({"job": "mine", "pod": "mine-x", "output": 7})
    jobs = RunJobs(SPEC, WorkflowTarget("flows:wf", "wf", "wf"), store, (RUN, 2))  # type: ignore[arg-type]

    async def scenario() -> Any:
        started = asyncio.ensure_future(jobs.start(StepUpdate("a", StepStatus.RUNNING), _step))
        await until(lambda: "mine" in jobs._waiting, "step a to adopt its Job and await it")
        jobs._on_event("job", "MODIFIED", _job("mine", 2, "a", finished=True))
        output = await asyncio.wait_for(started, 5)
        await jobs.close()
        return output

    assert asyncio.run(scenario()) == 7
    assert cluster.created == []  # adopted, not started again
    assert cluster.deleted[:2] == ["stale", "mine-done"]
    assert "later" not in cluster.deleted and "other-run" not in cluster.deleted
    assert "mine" in cluster.deleted  # done: its Job goes too


def test_a_job_that_succeeded_without_writing_this_attempts_output_fails_its_step(monkeypatch):
    cluster = ScriptedCluster()
    monkeypatch.setattr(runner_module, "cluster_for", lambda spec: cluster)
    monkeypatch.setattr(Watcher, "start", lambda self: None)
    assert SPEC is not None
    store = OneStepStore({"job": "someone-else", "output": 7})
    jobs = RunJobs(SPEC, WorkflowTarget("flows:wf", "wf", "wf"), store, (RUN, 2))  # type: ignore[arg-type]

    async def scenario() -> None:
        started = asyncio.ensure_future(jobs.start(StepUpdate("a", StepStatus.RUNNING), _step))
        await until(lambda: jobs._waiting, "the step to create its Job and await it")
        (name,) = cluster.created
        jobs._on_event("job", "MODIFIED", {**_job(name, 2, "a", finished=True)})
        await asyncio.wait_for(started, 5)

    with pytest.raises(JobFailed, match="output is not in the store"):
        asyncio.run(scenario())


def test_a_step_stopped_while_its_job_runs_deletes_the_job(monkeypatch):
    """What a cancel past its grace and lost pool slots both do: the orchestrator cancels the start."""
    cluster = ScriptedCluster()
    monkeypatch.setattr(runner_module, "cluster_for", lambda spec: cluster)
    monkeypatch.setattr(Watcher, "start", lambda self: None)
    assert SPEC is not None
    jobs = RunJobs(SPEC, WorkflowTarget("flows:wf", "wf", "wf"), OneStepStore(None), (RUN, 2))  # type: ignore[arg-type]

    async def scenario() -> None:
        started = asyncio.ensure_future(jobs.start(StepUpdate("a", StepStatus.RUNNING), _step))
        await until(lambda: jobs._waiting, "the step to create its Job and await it")
        assert len(cluster.created) == 1 and cluster.deleted == []
        started.cancel()
        await asyncio.wait([started])
        await jobs.close()

    asyncio.run(scenario())
    assert cluster.deleted == cluster.created


def test_a_step_stopped_while_its_job_is_being_created_deletes_it_once_created(monkeypatch):
    cluster = ScriptedCluster()
    creating = threading.Event()
    let_create = threading.Event()
    plain_create = cluster.create_job

    def slow_create(manifest: dict[str, Any]) -> dict[str, Any]:
        creating.set()
        let_create.wait(30)
        return plain_create(manifest)

    cluster.create_job = slow_create  # type: ignore[method-assign]
    monkeypatch.setattr(runner_module, "cluster_for", lambda spec: cluster)
    monkeypatch.setattr(Watcher, "start", lambda self: None)
    assert SPEC is not None
    jobs = RunJobs(SPEC, WorkflowTarget("flows:wf", "wf", "wf"), OneStepStore(None), (RUN, 2))  # type: ignore[arg-type]

    async def scenario() -> None:
        started = asyncio.ensure_future(jobs.start(StepUpdate("a", StepStatus.RUNNING), _step))
        assert await asyncio.to_thread(creating.wait, 30)
        started.cancel()
        await asyncio.wait([started])
        let_create.set()
        await until(lambda: cluster.deleted, "the Job created after the stop to be deleted")
        await jobs.close()

    asyncio.run(scenario())
    assert cluster.created and cluster.deleted == cluster.created  # it never runs unclaimed


def test_a_list_asked_for_before_a_job_was_created_does_not_make_it_deleted(monkeypatch):
    cluster = ScriptedCluster()
    monkeypatch.setattr(runner_module, "cluster_for", lambda spec: cluster)
    monkeypatch.setattr(Watcher, "start", lambda self: None)
    assert SPEC is not None
    jobs = RunJobs(SPEC, WorkflowTarget("flows:wf", "wf", "wf"), OneStepStore(None), (RUN, 2))  # type: ignore[arg-type]

    async def scenario() -> None:
        asked_before = time.monotonic()
        started = asyncio.ensure_future(jobs.start(StepUpdate("a", StepStatus.RUNNING), _step))
        await until(lambda: jobs._waiting, "the step to create its Job and await it")
        jobs._on_listed("job", [], asked_before)  # answered late: the Job did not exist yet
        await asyncio.sleep(0.05)
        assert not started.done()
        jobs._on_listed("job", [], time.monotonic())  # asked for after its creation: it is gone
        with pytest.raises(JobFailed, match="deleted while it ran"):
            await asyncio.wait_for(started, 5)
        await jobs.close()

    asyncio.run(scenario())


def _step(n: int) -> int:
    return n
