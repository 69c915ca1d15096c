"""Steps as Kubernetes Jobs, end to end: the real client against kmock, the real pod entry point
(`tidegate.steppod`, run as a local process by the fake kubelet) and the real store."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from dataclasses import replace

import pytest
from typer.testing import CliRunner

from tests.kubernetes import flows
from tests.kubernetes.kube import FakeKubelet, attempts_of, wait_for
from tidegate import App, Executor, RunStatus
from tidegate.cli.main import app as cli
from tidegate.domain.steps import StepStatus
from tidegate.workflow.kubernetes.cluster import Cluster
from tidegate.workflow.kubernetes.jobs import run_label
from tidegate.workflow.kubernetes.watcher import Watcher

pytestmark = pytest.mark.slow

# Ten steps under a cap of three: four waves of Jobs, so the cap binds again and again (thirty
# under five proved nothing more, at three times the pods, each a Python process of its own).
WIDE = 10
CAP = flows.WIDE_CAP
LEASE = 60.0  # seconds: the killed worker's lease (the test advances the clock past it)


def _outputs_written(app: App, run_id: str) -> Counter[str]:
    return Counter(e.step_key for e in app.store.run_events(run_id) if e.type == "StepOutputWritten")


def test_mapped_steps_never_have_more_live_jobs_than_their_cap(kapp: App, kubelet: FakeKubelet, start_worker):
    start_worker(kapp)
    run = kapp.tasks["k8s.wide"].submit(n=WIDE)
    assert run.wait(timeout=180) == sum(n * n for n in range(WIDE))

    assert kubelet.peak[run_label(run.id)] <= CAP  # sampled from the API server on every kubelet pass
    assert kubelet.peak[run_label(run.id)] >= 2  # ... and the steps did run side by side
    keys = [f"square[{n}]" for n in range(WIDE)] + ["total"]
    assert kubelet.launches == Counter(dict.fromkeys(keys, 1))  # every step ran exactly once, as a pod
    assert _outputs_written(kapp, run.id) == Counter(dict.fromkeys(keys, 1))
    steps = {s.step_key: s for s in kapp.store.run_steps(run.id)}
    assert all(steps[f"square[{n}]"].status is StepStatus.COMPLETED for n in range(WIDE))
    assert [steps[f"square[{n}]"].output for n in range(WIDE)] == [n * n for n in range(WIDE)]  # checkpointed
    written = next(e for e in kapp.store.run_events(run.id) if e.type == "StepOutputWritten")
    assert written.metadata["job"] in kubelet.jobs_seen and written.metadata["pod"].startswith(written.metadata["job"])
    wait_for(lambda: kubelet.live_jobs() == [], 30, "every Job to be deleted")

    shown = CliRunner(env={"COLUMNS": "250"}).invoke(cli, ["runs", "show", run.id, "--database", kapp.database])
    assert shown.exit_code == 0, shown.output
    assert "StepOutputWritten" in shown.output and written.metadata["pod"] in shown.output  # `runs show` names them


def test_a_pool_of_two_is_never_exceeded_across_two_runs(kapp: App, kubelet: FakeKubelet, start_worker):
    kapp.set_pool_limit(flows.POOL, 2)
    start_worker(kapp, max_workers=2)
    runs = [kapp.tasks["k8s.pooled"].submit(n=5) for _ in range(2)]
    for run in runs:
        assert run.wait(timeout=180) == [n * n for n in range(5)]
    assert kubelet.peak_all <= 2  # every Job of both runs holds the pool: unfinished Jobs never exceed it
    assert kubelet.peak_all == 2  # ... and the pool was used up to its limit
    assert sum(kubelet.launches.values()) == 10
    assert kapp.store.pool_holders(flows.POOL) == []


def test_a_failed_pod_is_retried_and_an_unpullable_image_fails_its_step_with_the_reason(
    kapp: App, kubelet: FakeKubelet, start_worker, tmp_path
):
    start_worker(kapp)
    retried = kapp.tasks["k8s.retried"].submit(marker=str(tmp_path / "failed-once"))
    unpullable = kapp.tasks["k8s.unpullable"].submit()
    assert retried.wait(timeout=120) == "second try"
    assert kubelet.launches["flaky"] == 2  # one pod per try
    failed = [e for e in kapp.store.run_events(retried.id) if e.type == "StepFailed"]
    assert len(failed) == 1 and "BackoffLimitExceeded" in failed[0].metadata["error"]
    assert "Job tg-" in failed[0].metadata["error"] and "(pod tg-" in failed[0].metadata["error"]
    assert "RuntimeError: first try fails on purpose" in failed[0].metadata["error"]  # the pod's own error

    with pytest.raises(Exception, match="ImagePullBackOff"):
        unpullable.wait(timeout=120)
    assert unpullable.status() is RunStatus.FAILED
    assert "ImagePullBackOff" in (unpullable.info().error or "")
    assert kubelet.launches["square"] == 0  # the image never ran
    wait_for(lambda: kubelet.live_jobs() == [], 30, "the failed steps' Jobs to be deleted")


def test_an_evicted_pod_and_a_job_past_its_active_deadline_fail_their_steps_with_the_reason(
    kapp: App, kubelet: FakeKubelet, start_worker, tmp_path
):
    marker = tmp_path / "hold"
    marker.write_text("the steps run until stopped")
    start_worker(kapp, max_workers=2)
    evictable = kapp.tasks["k8s.evictable"].submit(n=1, marker=str(marker))
    deadline = kapp.tasks["k8s.deadline"].submit(n=1, marker=str(marker))

    # Only the evictable step's pod must be running: the other's 2 s deadline may stop its pod before its
    # process has started on a loaded machine (it failed so at load 16), and the step reads its Job's
    # condition (DeadlineExceeded) either way.
    def evictable_running() -> list[str]:
        jobs = kubelet.live_jobs(run_label(evictable.id))
        return jobs if jobs and list(tmp_path.glob(f"hold.*.{jobs[0]}-*")) else []

    wait_for(evictable_running, 90, "the evictable step running in its pod")
    (job,) = kubelet.live_jobs(run_label(evictable.id))
    kubelet.evict(job)
    with pytest.raises(Exception, match="Evicted"):
        evictable.wait(timeout=60)
    with pytest.raises(Exception, match="DeadlineExceeded"):
        deadline.wait(timeout=60)
    assert "Evicted: The node was low on resource: memory." in (evictable.info().error or "")
    wait_for(lambda: kubelet.live_jobs() == [], 30, "the failed steps' Jobs to be deleted")


def test_cancel_deletes_the_runs_jobs(kapp: App, kubelet: FakeKubelet, start_worker, tmp_path, monkeypatch):
    monkeypatch.setenv("TIDEGATE_CANCEL_GRACE", "0.5s")
    marker = tmp_path / "hold"
    marker.write_text("the steps run until the run is canceled")
    start_worker(kapp)
    run = kapp.tasks["k8s.holding"].submit(n=3, marker=str(marker))
    wait_for(lambda: len(list(tmp_path.glob("hold.*.tg-*"))) == 3, 90, "three steps running in their pods")
    run.cancel()
    wait_for(lambda: run.status() is RunStatus.CANCELED, 60, "the run to be canceled")
    wait_for(lambda: kubelet.live_jobs(run_label(run.id)) == [], 30, "the canceled run's Jobs to be deleted")
    wait_for(lambda: kubelet.running_processes() == 0, 10, "their pods to be stopped (the kubelet's next pass)")
    assert len(kubelet.deleted) == 3  # deleted while they ran, not left to finish


def test_a_sigkilled_workers_jobs_are_deleted_by_the_next_attempt_and_none_is_left(
    database_url, kapp: App, kubelet: FakeKubelet, kube_server, worker_processes, start_worker, tmp_path, clock
):
    marker = tmp_path / "hold"
    marker.write_text("the first attempt's steps run until its worker is killed")
    # A lease no stall outlasts (a 1 s, then 3 s one lapsed under load while the worker lived, and a
    # third attempt followed): the test moves the app's clock past it once the worker is dead.
    env = {"TIDEGATE_LEASE_DURATION": f"{LEASE:g}s", "TIDEGATE_TEST_KUBECONFIG": kube_server.kubeconfig}
    run = kapp.tasks["k8s.holding"].submit(n=3, marker=str(marker))
    first = worker_processes.spawn("tests.kubernetes.flows:app", database_url, max_workers=2, env=env)
    wait_for(lambda: len(list(tmp_path.glob("hold.*.tg-*"))) == 3, 90, "three steps of the first attempt running")
    worker_processes.kill(first)
    first_jobs = set(kubelet.live_jobs(run_label(run.id)))
    assert len(first_jobs) == 3  # the dead worker's Jobs are still there, their pods still running

    clock.advance(LEASE + 1)  # the dead worker's lease and heartbeat have lapsed on the app's clock

    def swept() -> bool:  # the sweeper re-queues the run
        kapp.store.sweep("test-sweeper", 0.1)
        return run.status() is RunStatus.QUEUED

    wait_for(swept, 30, "the run to be re-queued by the sweeper")
    start_worker(kapp)
    wait_for(lambda: attempts_of(kubelet)["2"] == 3, 90, "the second attempt's three Jobs")
    wait_for(lambda: first_jobs <= kubelet.deleted, 30, "the first attempt's Jobs to be deleted while they ran")
    marker.unlink()
    assert run.wait(timeout=120) == [0, 1, 2]
    assert run.info().attempt == 2
    assert attempts_of(kubelet) == Counter({"1": 3, "2": 3})
    wait_for(lambda: kubelet.live_jobs() == [], 30, "no Job left behind")
    wait_for(lambda: kubelet.running_processes() == 0, 10, "no pod left running")


def test_a_stopped_watcher_ends_its_open_watch_requests_at_once(kube_server):
    """Not at their timeout (a minute by default): till then each held its connection and thread, and the
    API server (kmock here) could not shut down."""
    spec = Executor.kubernetes(flows.IMAGE, store_secret=flows.SECRET, namespace=flows.NAMESPACE).pods
    assert spec is not None and spec.watch_seconds == 60
    cluster = Cluster(replace(spec, kubeconfig=kube_server.kubeconfig))
    loop = asyncio.new_event_loop()
    before = set(threading.enumerate())
    watcher = Watcher(cluster, "tidegate.dev/run=x", loop, lambda *a: None, lambda *a: None, 60, 3600)
    try:
        watcher.start()
        followers = [t for t in set(threading.enumerate()) - before if t.name.startswith("tidegate-k8s-")]
        assert len(followers) == 3  # a watch per kind, and the backstop
        wait_for(lambda: len(watcher._ends) == 2, 30, "both watch requests open")
        watcher.stop()
        # A third of the requests' timeout, all told: only ending them at once explains it.
        deadline = time.monotonic() + 20
        for follower in followers:
            follower.join(max(0.0, deadline - time.monotonic()))
        assert not any(follower.is_alive() for follower in followers)
    finally:
        watcher.stop()
        loop.close()
