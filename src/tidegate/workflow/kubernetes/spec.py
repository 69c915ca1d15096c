"""What `Executor.kubernetes(...)` was given: where and how each step's Job runs.

Plain data, checked when the workflow is declared; nothing here talks to a
cluster (the client is loaded when a run's first step starts).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType

from tidegate.domain.errors import ConfigurationError
from tidegate.storage.urls import DATABASE_ENV

DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
DEFAULT_SECRET_KEY = "url"
WATCH_SECONDS = 60  # a watch request ends after this long (server side), then resumes from its resource version
BACKSTOP_POLL_SECONDS = 30.0  # a full re-list this often, in case a watch missed something
JOB_ENV = "TIDEGATE_K8S_JOB"
POD_ENV = "TIDEGATE_K8S_POD"
# What the pod's own variables are: `env` may not set them, since a later entry wins in a container's
# env, so a plain-text TIDEGATE_DATABASE would override the Secret and show the URL to whoever reads Jobs.
RESERVED_ENV = (DATABASE_ENV, JOB_ENV, POD_ENV)


@dataclass(frozen=True)
class KubernetesSpec:
    """The Job template of a workflow's steps, and how the worker reaches the cluster.

    `store_secret` names the Secret (in `namespace`) whose `store_secret_key`
    holds the database URL: the pod reads it through `secretKeyRef`, so the
    URL never appears in the Job spec.
    """

    image: str
    store_secret: str
    namespace: str = "default"
    store_secret_key: str = DEFAULT_SECRET_KEY
    resources: Mapping[str, str] = field(default_factory=dict)
    service_account: str | None = None
    active_deadline_seconds: int | None = None
    image_pull_policy: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    kubeconfig: str | None = None  # None: in-cluster config, else $KUBECONFIG or ~/.kube/config
    context: str | None = None
    watch_seconds: int = WATCH_SECONDS
    poll_seconds: float = BACKSTOP_POLL_SECONDS

    def __post_init__(self) -> None:
        for name in ("image", "store_secret", "namespace", "store_secret_key"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise ConfigurationError(f"Executor.kubernetes: {name} must be a non-empty string, got {value!r}")
        for name in ("namespace", "store_secret"):
            if not DNS_LABEL.fullmatch(getattr(self, name)):
                raise ConfigurationError(
                    f"Executor.kubernetes: {name} {getattr(self, name)!r} is not a valid Kubernetes name"
                )
        deadline = self.active_deadline_seconds
        if deadline is not None and (isinstance(deadline, bool) or not isinstance(deadline, int) or deadline < 1):
            raise ConfigurationError(f"Executor.kubernetes: active_deadline_seconds must be >= 1, got {deadline!r}")
        if isinstance(self.watch_seconds, bool) or not isinstance(self.watch_seconds, int) or self.watch_seconds < 1:
            raise ConfigurationError(f"Executor.kubernetes: watch_seconds must be >= 1, got {self.watch_seconds!r}")
        if not isinstance(self.poll_seconds, (int, float)) or self.poll_seconds <= 0:
            raise ConfigurationError(f"Executor.kubernetes: poll_seconds must be > 0, got {self.poll_seconds!r}")
        for name in ("resources", "env"):
            mapping = getattr(self, name)
            if not isinstance(mapping, Mapping) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in mapping.items()
            ):
                raise ConfigurationError(f"Executor.kubernetes: {name} must map strings to strings, got {mapping!r}")
            object.__setattr__(self, name, MappingProxyType(dict(mapping)))
        _refuse_reserved(self.env)

    def __hash__(self) -> int:  # the mappings are read-only views: hash their items (an Executor is hashable)
        values = [getattr(self, f.name) for f in fields(self)]
        return hash(tuple(tuple(sorted(v.items())) if isinstance(v, Mapping) else v for v in values))


def _refuse_reserved(env: Mapping[str, str]) -> None:
    reserved = sorted(set(env) & set(RESERVED_ENV))
    if reserved:
        raise ConfigurationError(
            f"Executor.kubernetes: env may not set {', '.join(reserved)}: the pod sets it itself "
            f"({DATABASE_ENV} from the Secret store_secret)"
        )
