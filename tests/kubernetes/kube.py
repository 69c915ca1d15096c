"""An in-memory Kubernetes API server (kmock) and a fake kubelet, for the executor's end-to-end tests.

`KubeServer` runs kmock's `KubernetesEmulator` (list, watch, create, patch,
delete of any resource, served over HTTP on 127.0.0.1) on a thread of its
own, and writes a kubeconfig pointing at it, so the executor's real client
code talks HTTP to it exactly as to a cluster.

`FakeKubelet` plays the Job controller and the kubelet: for each Job it sees
it creates a pod, resolves the container's env (a `secretKeyRef` from the
Secret as stored in the server, `fieldRef: metadata.name`), runs the
container's command as a local process (`python` is this interpreter, the
repository on its path), and patches pod and Job status as the process runs
and exits (Complete, or Failed with BackoffLimitExceeded). An image it
"cannot pull" gets ErrImagePull, then ImagePullBackOff, and never runs. A
deleted Job's process is killed and its pod deleted; so is one that runs past the Job's
`activeDeadlineSeconds` (DeadlineExceeded) or that a test evicts (`evict`). Every pass samples the
Jobs that have not finished, per run label: what the tests hold the caps to.
"""

from __future__ import annotations

import asyncio
import base64
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import kmock
from kubernetes import client

from tests.conftest import REPO_ROOT
from tidegate.workflow.kubernetes.jobs import ANNOTATION_STEP_KEY, LABEL_ATTEMPT, LABEL_RUN

PASS_SECONDS = 0.05


class KubeServer:
    def __init__(self, folder: Path) -> None:
        self.kubeconfig = str(folder / "kubeconfig")
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopped: asyncio.Event | None = None
        self.url = ""
        self._thread = threading.Thread(target=lambda: asyncio.run(self._serve()), name="kmock", daemon=True)

    def start(self) -> KubeServer:
        self._thread.start()
        assert self._ready.wait(30), "kmock did not start"
        Path(self.kubeconfig).write_text(
            "apiVersion: v1\nkind: Config\ncurrent-context: kmock\n"
            f"clusters:\n- name: kmock\n  cluster:\n    server: {self.url}\n"
            "users:\n- name: tester\n  user:\n    token: test-token\n"
            "contexts:\n- name: kmock\n  context:\n    cluster: kmock\n    user: tester\n"
        )
        return self

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopped = asyncio.Event()
        async with kmock.KubernetesEmulator() as emulator, kmock.Server(emulator) as server:
            emulator.resources["batch/v1/jobs"] = {}
            emulator.resources["v1/pods"] = {}
            emulator.resources["v1/secrets"] = {}
            self.url = str(server.url).rstrip("/")
            self._ready.set()
            await self._stopped.wait()

    def stop(self) -> None:
        if self._loop is not None and self._stopped is not None:
            self._loop.call_soon_threadsafe(self._stopped.set)
        self._thread.join(10)

    def api(self) -> client.ApiClient:
        configuration = client.Configuration()
        configuration.host = self.url
        return client.ApiClient(configuration)


class FakeKubelet:
    def __init__(self, server: KubeServer, namespace: str, unpullable: str, folder: Path) -> None:
        api = server.api()
        self._batch = client.BatchV1Api(api)
        self._core = client.CoreV1Api(api)
        self._api = api
        self._namespace = namespace
        self._unpullable = unpullable
        self._folder = folder
        self._processes: dict[str, tuple[subprocess.Popen[bytes], str]] = {}  # job -> (process, pod)
        self._pods: dict[str, str] = {}  # job -> pod
        self._pull_tries: Counter[str] = Counter()
        self._started: dict[str, float] = {}  # job -> when its process started (activeDeadlineSeconds)
        self._evicting: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fake-kubelet", daemon=True)
        self.lock = threading.Lock()
        self.jobs_seen: dict[str, dict[str, Any]] = {}  # name -> labels + step key, every Job ever created
        self.deleted: set[str] = set()  # Jobs deleted while their process was running
        self.launches: Counter[str] = Counter()  # step key -> processes started
        self.peak: dict[str, int] = defaultdict(int)  # run label -> most unfinished Jobs seen at once
        self.peak_all = 0
        self.errors: list[str] = []

    def start(self) -> FakeKubelet:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        for process, _ in self._processes.values():
            if process.poll() is None:
                os.kill(process.pid, signal.SIGKILL)
            process.wait(10)

    def live_jobs(self, run_label: str | None = None) -> list[str]:
        items = self._batch.list_namespaced_job(self._namespace).items
        return [
            job.metadata.name
            for job in items
            if run_label is None or (job.metadata.labels or {}).get(LABEL_RUN) == run_label
        ]

    def running_processes(self) -> int:
        with self.lock:
            return sum(1 for process, _ in self._processes.values() if process.poll() is None)

    def _run(self) -> None:
        while not self._stop.wait(PASS_SECONDS):
            try:
                self._pass()
            except client.ApiException as error:
                if error.status != 404:  # 404: deleted between this pass's list and its patch; seen next pass
                    self.errors.append(repr(error))
            except Exception as error:  # the test sees it: a kubelet that fails must not pass silently
                self.errors.append(repr(error))

    def _pass(self) -> None:
        jobs = {job["metadata"]["name"]: job for job in self._plain(self._batch.list_namespaced_job(self._namespace))}
        unfinished: Counter[str] = Counter()
        for name, job in jobs.items():
            labels = job["metadata"].get("labels") or {}
            if not (job.get("status") or {}).get("conditions"):
                unfinished[labels.get(LABEL_RUN, "")] += 1
            if name not in self.jobs_seen:
                step_key = (job["metadata"].get("annotations") or {}).get(ANNOTATION_STEP_KEY, "")
                self.jobs_seen[name] = {**labels, "step_key": step_key}
                self._launch(name, job, step_key)
            elif name in self._pull_tries:
                self._pull_again(name)
            else:
                self._check(name, job)
        with self.lock:
            for run, count in unfinished.items():
                self.peak[run] = max(self.peak[run], count)
            self.peak_all = max(self.peak_all, sum(unfinished.values()))
        for name in [name for name in self._pods if name not in jobs]:
            self._forget(name)

    def _launch(self, name: str, job: dict[str, Any], step_key: str) -> None:
        template = job["spec"]["template"]
        container = template["spec"]["containers"][0]
        pod = f"{name}-{uuid.uuid4().hex[:5]}"
        labels = {**(template["metadata"].get("labels") or {}), "job-name": name}
        self._core.create_namespaced_pod(
            self._namespace,
            {"metadata": {"name": pod, "labels": labels}, "spec": template["spec"], "status": {"phase": "Pending"}},
        )
        self._pods[name] = pod
        if container["image"] == self._unpullable:
            self._pull_tries[name] = 1
            self._container_waiting(name, "ErrImagePull", f'failed to pull image "{container["image"]}": not found')
            return
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
        for entry in container.get("env") or []:
            env[entry["name"]] = self._env_value(entry, pod)
        command = [sys.executable if part == "python" else part for part in container["command"]]
        log = open(self._folder / f"{pod}.log", "wb")  # noqa: SIM115 - closed once the process has it
        try:
            process = subprocess.Popen([*command, *container["args"]], env=env, cwd=REPO_ROOT, stdout=log, stderr=log)
        finally:
            log.close()
        with self.lock:
            self._processes[name] = (process, pod)
            self._started[name] = time.monotonic()
            self.launches[step_key] += 1
        self._core.patch_namespaced_pod(pod, self._namespace, {"status": {"phase": "Running"}})
        self._batch.patch_namespaced_job(name, self._namespace, {"status": {"active": 1}})

    def _env_value(self, entry: dict[str, Any], pod: str) -> str:
        if "value" in entry:
            return str(entry["value"])
        source = entry["valueFrom"]
        if "secretKeyRef" in source:
            ref = source["secretKeyRef"]
            secret = self._core.read_namespaced_secret(ref["name"], self._namespace)
            return base64.b64decode(secret.data[ref["key"]]).decode()
        if source.get("fieldRef", {}).get("fieldPath") == "metadata.name":
            return pod
        raise ValueError(f"the fake kubelet cannot resolve env {entry!r}")

    def _container_waiting(self, name: str, reason: str, message: str) -> None:
        waiting = _container({"waiting": {"reason": reason, "message": message}})
        self._core.patch_namespaced_pod(
            self._pods[name], self._namespace, {"status": {"phase": "Pending", "containerStatuses": [waiting]}}
        )

    def _pull_again(self, name: str) -> None:
        self._pull_tries[name] += 1
        if self._pull_tries[name] == 3:
            self._container_waiting(name, "ImagePullBackOff", "Back-off pulling image")

    def evict(self, job_name: str) -> None:
        """Evict the Job's pod on the next pass (its process is killed, as a node under pressure does)."""
        with self.lock:
            self._evicting.add(job_name)

    def _stop_pod(self, name: str, process: subprocess.Popen[bytes], pod: str, reason: str, message: str) -> None:
        os.kill(process.pid, signal.SIGKILL)
        process.wait(10)
        self._core.patch_namespaced_pod(
            pod, self._namespace, {"status": {"phase": "Failed", "reason": reason, "message": message}}
        )

    def _check(self, name: str, job: dict[str, Any]) -> None:
        with self.lock:
            entry = self._processes.get(name)
            evicting = name in self._evicting
        if entry is None or entry[1] == "":
            return
        process, pod = entry
        deadline = job["spec"].get("activeDeadlineSeconds")
        if process.poll() is None and evicting:
            self._stop_pod(name, process, pod, "Evicted", "The node was low on resource: memory.")
            self._job_failed(name, process, "BackoffLimitExceeded", "Job has reached the specified backoff limit")
            return
        if process.poll() is None and deadline and time.monotonic() - self._started[name] > deadline:
            self._stop_pod(
                name, process, pod, "DeadlineExceeded", "Pod was active on the node longer than specified deadline"
            )
            self._job_failed(name, process, "DeadlineExceeded", "Job was active longer than specified deadline")
            return
        if process.poll() is None:
            return
        code = process.returncode
        state: dict[str, Any] = {"exitCode": code, "reason": "Completed" if code == 0 else "Error"}
        if code != 0:  # terminationMessagePolicy FallbackToLogsOnError: the log's tail
            state["message"] = (self._folder / f"{pod}.log").read_text(errors="replace")[-2048:]
        terminated = _container({"terminated": state})
        phase = "Succeeded" if code == 0 else "Failed"
        self._core.patch_namespaced_pod(
            pod, self._namespace, {"status": {"phase": phase, "containerStatuses": [terminated]}}
        )
        if code != 0:
            self._job_failed(name, process, "BackoffLimitExceeded", "Job has reached the specified backoff limit")
            return
        status = {"active": 0, "succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}
        self._batch.patch_namespaced_job(name, self._namespace, {"status": status})
        with self.lock:
            self._processes[name] = (process, "")  # reported

    def _job_failed(self, name: str, process: subprocess.Popen[bytes], reason: str, message: str) -> None:
        condition = {"type": "Failed", "status": "True", "reason": reason, "message": message}
        self._batch.patch_namespaced_job(
            name, self._namespace, {"status": {"active": 0, "failed": 1, "conditions": [condition]}}
        )
        with self.lock:
            self._processes[name] = (process, "")  # reported

    def _forget(self, name: str) -> None:
        """The Job was deleted: kill its process (as a node would its pod) and delete the pod."""
        with self.lock:
            entry = self._processes.pop(name, None)
        if entry is not None and entry[0].poll() is None:
            self.deleted.add(name)
            os.kill(entry[0].pid, signal.SIGKILL)
            entry[0].wait(10)
        pod = self._pods.pop(name)
        self._pull_tries.pop(name, None)
        try:
            self._core.delete_namespaced_pod(pod, self._namespace)
        except client.ApiException as error:
            if error.status != 404:
                raise

    def _plain(self, listed: Any) -> list[dict[str, Any]]:
        return list(self._api.sanitize_for_serialization(listed).get("items") or [])


def _container(state: dict[str, Any]) -> dict[str, Any]:
    """A container status with the fields a real kubelet always sets (the client's models require them)."""
    return {"name": "step", "image": "step-image", "imageID": "", "ready": False, "restartCount": 0, "state": state}


def attempts_of(kubelet: FakeKubelet) -> Counter[str]:
    """How many Jobs each run attempt created (label `tidegate.dev/attempt`)."""
    return Counter(labels.get(LABEL_ATTEMPT, "") for labels in kubelet.jobs_seen.values())


def wait_for(predicate: Any, timeout: float, message: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {message}")
        time.sleep(0.05)
