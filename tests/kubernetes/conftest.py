"""Fixtures of the Kubernetes executor tests: a kmock API server, the Secret with the store URL,
a fake kubelet, and an app whose workflows run their steps as Jobs there."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from tests.kubernetes import flows
from tests.kubernetes.kube import FakeKubelet, KubeServer
from tidegate import App
from tidegate.domain.clock import Clock


@pytest.fixture
def kube_server(tmp_path: Path) -> Iterator[KubeServer]:
    server = KubeServer(tmp_path).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def kubelet(kube_server: KubeServer, database_url: str, tmp_path: Path) -> Iterator[FakeKubelet]:
    """The fake kubelet, with the store URL in the Secret the Jobs name (the only place it is given)."""
    core = client.CoreV1Api(kube_server.api())
    secret = {
        "metadata": {"name": flows.SECRET, "namespace": flows.NAMESPACE},
        "data": {"url": base64.b64encode(database_url.encode()).decode()},
    }
    core.create_namespaced_secret(flows.NAMESPACE, secret)
    pods = tmp_path / "pods"
    pods.mkdir()
    kubelet = FakeKubelet(kube_server, flows.NAMESPACE, flows.BAD_IMAGE, pods).start()
    try:
        yield kubelet
    finally:
        kubelet.stop()
    assert kubelet.errors == [], kubelet.errors


@pytest.fixture
def kapp(database_url: str, kube_server: KubeServer, kubelet: FakeKubelet, clock: Clock) -> Iterator[App]:
    """The app, on the test's clock: a test advances it past a lease rather than waiting one out."""
    app = flows.make_app(database_url, kube_server.kubeconfig, clock=clock)
    try:
        yield app
    finally:
        app.close()
