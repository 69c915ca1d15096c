"""The only module that calls the Kubernetes client (sync; the runner calls it off the loop).

Objects cross this module as plain dicts, as the API serves them (camelCase),
so the rest of the package is pure and testable without the client. The
client's config loads on first use: in-cluster when the worker runs in a pod,
else the kubeconfig (`KubernetesSpec.kubeconfig`, $KUBECONFIG, ~/.kube/config).
"""

from __future__ import annotations

import importlib
import json
import threading
from collections.abc import Callable, Iterator
from typing import Any

from tidegate.domain.errors import ConfigurationError
from tidegate.workflow.kubernetes.spec import KubernetesSpec

Obj = dict[str, Any]
NOT_FOUND, CONFLICT, GONE = 404, 409, 410
REQUEST_SECONDS = 30  # a plain API call that takes longer fails (a watch has its own, longer, timeout)


class ResourceGone(Exception):
    """The watch's resource version is too old (410 Gone): re-list, then watch from the new version."""


class Cluster:
    """One namespace's Jobs and pods, through one API client (thread-safe: urllib3's pool)."""

    def __init__(self, spec: KubernetesSpec) -> None:
        try:
            # Imported as Any: the client's types are partial, and this module passes plain dicts anyway.
            kubernetes: Any = importlib.import_module("kubernetes")
            for submodule in ("client", "config", "watch"):
                importlib.import_module(f"kubernetes.{submodule}")
        except ImportError as error:
            raise ConfigurationError(
                "Executor.kubernetes needs the Kubernetes client: pip install 'tidegate[kubernetes]'"
            ) from error
        config = kubernetes.client.Configuration()
        try:
            kubernetes.config.load_incluster_config(client_configuration=config)
        except kubernetes.config.ConfigException:
            kubernetes.config.load_kube_config(
                config_file=spec.kubeconfig, context=spec.context, client_configuration=config
            )
        self._kubernetes = kubernetes
        self._read_timeout: type[Exception] = importlib.import_module("urllib3.exceptions").ReadTimeoutError
        self.api = kubernetes.client.ApiClient(config)
        self.namespace = spec.namespace
        self._batch = kubernetes.client.BatchV1Api(self.api)
        self._core = kubernetes.client.CoreV1Api(self.api)

    def create_job(self, manifest: Obj) -> Obj | None:
        """Create the Job; None if one of that name exists already (the caller reads it)."""
        try:
            response = self._batch.create_namespaced_job(
                self.namespace, manifest, _request_timeout=REQUEST_SECONDS, _preload_content=False
            )
        except self._kubernetes.client.ApiException as error:
            if error.status == CONFLICT:
                return None
            raise
        return _json(response.data)

    def delete_job(self, name: str) -> bool:
        """Delete a Job and (in the background) its pods; False if it was gone already."""
        try:
            self._batch.delete_namespaced_job(
                name,
                self.namespace,
                propagation_policy="Background",
                _request_timeout=REQUEST_SECONDS,
                _preload_content=False,
            )
        except self._kubernetes.client.ApiException as error:
            if error.status == NOT_FOUND:
                return False
            raise
        return True

    def list(self, kind: str, selector: str) -> tuple[list[Obj], str | None]:
        """Every Job or pod (`kind`) matching the label selector, and the list's resource version."""
        response = self._lister(kind)(
            self.namespace, label_selector=selector, _request_timeout=REQUEST_SECONDS, _preload_content=False
        )
        listed = _json(response.data)
        version = (listed.get("metadata") or {}).get("resourceVersion")
        return list(listed.get("items") or []), _usable(version)

    def watch(
        self, kind: str, selector: str, version: str | None, seconds: int, opened: Callable[[Callable[[], None]], None]
    ) -> Iterator[tuple[str, Obj]]:
        """Events (type, object) after `version`, for up to `seconds`; ResourceGone on 410.

        Once the request is open, `opened` is given a function that ends it at once from any
        thread (its socket is shut down, so a read blocked on it returns): a follower that stops
        need not hold the connection, and its thread, until the request times out.
        Objects stay plain JSON: the client's models would reject what an older or newer
        server leaves out, and nothing here needs them."""
        options: dict[str, Any] = {
            "label_selector": selector,
            "watch": True,
            "allow_watch_bookmarks": True,
            "timeout_seconds": seconds,
            "_request_timeout": seconds + 5,  # a server that ignores timeoutSeconds still ends the request
            "_preload_content": False,
        }
        if version is not None:
            options["resource_version"] = version
        try:
            response = self._lister(kind)(self.namespace, **options)
        except self._kubernetes.client.ApiException as error:
            if error.status == GONE:
                raise ResourceGone(str(error.reason)) from error
            raise
        try:
            opened(response.shutdown)
            yield from self._events(response)
        except self._read_timeout:
            return  # the request's own timeout: a server that ignores timeoutSeconds, and nothing happened
        finally:
            response.close()
            response.release_conn()

    def _events(self, response: Any) -> Iterator[tuple[str, Obj]]:
        for line in self._kubernetes.watch.watch.iter_resp_lines(response):
            if not line:
                continue
            event = _json(line)
            obj = event.get("object") or {}
            if event.get("type") == "ERROR":
                if obj.get("code") == GONE:
                    raise ResourceGone(str(obj.get("message")))
                raise RuntimeError(f"watch error: {obj.get('reason')}: {obj.get('message')}")
            yield str(event.get("type")), obj

    def _lister(self, kind: str) -> Any:
        return self._batch.list_namespaced_job if kind == "job" else self._core.list_namespaced_pod


def _json(data: bytes | str) -> Obj:
    loaded = json.loads(data)
    if not isinstance(loaded, dict):
        raise ValueError(f"the Kubernetes API answered {type(loaded).__name__}, not an object")
    return loaded


def _usable(version: Any) -> str | None:
    """A resource version to resume from (an emulator may serve a placeholder, which is none)."""
    return version if isinstance(version, str) and version.isdigit() else None


_clusters: dict[tuple[str | None, str | None, str], Cluster] = {}
_clusters_lock = threading.Lock()


def cluster_for(spec: KubernetesSpec) -> Cluster:
    """The process's client for this config and namespace, loaded on first use (not at import)."""
    key = (spec.kubeconfig, spec.context, spec.namespace)
    with _clusters_lock:
        cluster = _clusters.get(key)
        if cluster is None:
            cluster = _clusters[key] = Cluster(spec)
        return cluster
