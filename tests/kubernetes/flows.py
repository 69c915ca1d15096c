"""Workflows whose steps run as Kubernetes Jobs (the fake kubelet runs each pod as a local process).

Steps and workflow functions are module-level, so a pod imports them by
module path (`tidegate.steppod`). `make_app(database, kubeconfig)` registers
the workflows on an app of the test's database; worker subprocesses import
`tests.kubernetes.flows:app` (database from $TIDEGATE_DATABASE, kubeconfig
from $TIDEGATE_TEST_KUBECONFIG).
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import tidegate
from tidegate import Executor, Workflow

NAMESPACE = "batch"
SECRET = "tidegate-store"
IMAGE = "registry.example/etl:1.4"
BAD_IMAGE = "registry.example/missing:0"  # the fake kubelet cannot pull it
POOL = "k8s-pool"
WIDE_CAP = 3  # k8s.wide's max_concurrent_steps: below the mapped steps' count, so it binds
POLL_SECONDS = 2.0  # the backstop re-list (the watch does the work)
WATCH_SECONDS = 3  # kmock ignores timeoutSeconds: the client's read timeout ends each watch request

_steps = tidegate.App("sqlite:///unused-step-declarations.db")  # declares steps; never opens a store


@_steps.step
def square(n: int) -> int:
    time.sleep(0.2)
    return n * n


@_steps.step(pool=POOL)
def pooled_square(n: int) -> int:
    time.sleep(0.3)
    return n * n


@_steps.step(max_attempts=2, retry_backoff=0.1)
def flaky(marker: str) -> str:
    """Fails its first try (the pod exits 1), succeeds on the retry."""
    path = Path(marker)
    if not path.exists():
        path.write_text("failed once")
        raise RuntimeError("first try fails on purpose")
    return "second try"


@_steps.step
async def held(n: int, marker: str) -> int:
    """Runs while `marker` exists (the Job the test kills or cancels under), then returns (an async
    step: the pod runs it with asyncio.run)."""
    await asyncio.to_thread(Path(f"{marker}.{n}.{os.environ.get('TIDEGATE_K8S_POD', '')}").touch)  # it started
    while await asyncio.to_thread(os.path.exists, marker):  # noqa: ASYNC110 - another process removes it
        await asyncio.sleep(0.1)
    return n


@_steps.step
def total(values: list[int]) -> int:
    return sum(values)


def wide(wf: Workflow, n: int):
    return wf.step(total, wf.map(square, list(range(n))))


def pooled(wf: Workflow, n: int):
    return wf.map(pooled_square, list(range(n)))


def retried(wf: Workflow, marker: str):
    return wf.step(flaky, marker)


def unpullable(wf: Workflow):
    return wf.step(square, 3)


def holding(wf: Workflow, n: int, marker: str):
    return wf.map(held, list(range(n)), marker=marker)


def executor(
    kubeconfig: str | None, max_concurrent_steps: int | None = None, image: str = IMAGE, deadline: int | None = None
) -> Executor:
    return Executor.kubernetes(
        image,
        active_deadline_seconds=deadline,
        store_secret=SECRET,
        namespace=NAMESPACE,
        max_concurrent_steps=max_concurrent_steps,
        resources={"cpu": "100m", "memory": "64Mi"},
        kubeconfig=kubeconfig,
        poll_seconds=POLL_SECONDS,
        watch_seconds=WATCH_SECONDS,
    )


def make_app(database: str | None, kubeconfig: str | None, **options) -> tidegate.App:
    app = tidegate.App(database, **options)
    app.workflow(name="k8s.wide", executor=executor(kubeconfig, max_concurrent_steps=WIDE_CAP))(wide)
    app.workflow(name="k8s.pooled", executor=executor(kubeconfig))(pooled)
    app.workflow(name="k8s.retried", executor=executor(kubeconfig))(retried)
    app.workflow(name="k8s.unpullable", executor=executor(kubeconfig, image=BAD_IMAGE))(unpullable)
    app.workflow(name="k8s.holding", max_attempts=3, executor=executor(kubeconfig))(holding)
    app.workflow(name="k8s.deadline", executor=executor(kubeconfig, deadline=2))(holding)
    app.workflow(name="k8s.evictable", executor=executor(kubeconfig))(holding)
    return app


app = make_app(None, os.environ.get("TIDEGATE_TEST_KUBECONFIG"))
