"""Prometheus metrics of a worker process: what it claimed, how long runs waited and ran, its overflow signals.

One registry story: these are process-wide objects (every worker of the
process counts into them), registered in the process's default registry, so
`tidegate worker --metrics-port N` (`serve_metrics`) and any exporter the user
already runs show them, and added to every HTTP API's own registry
(`include_in`, called by api/metrics.py), so `/metrics` of `tidegate serve`
or of a mounted `app.asgi()` shows the workers running in its process too. Durations are measured on the worker's
injected clock (the monotonic time a claim was sent, to the settling of the
attempt); the queue wait is the store's own count of how long a claimed run
had been due, so no two machines' clocks are compared.
"""

from __future__ import annotations

import collections
from collections.abc import Iterator, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, disable_created_metrics, start_http_server
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from tidegate.domain.model import ClaimedRun

# A `_created` series per counter and histogram doubles a scrape to say when this process started counting,
# which Prometheus reads from the process's own start time anyway: tidegate's exports never carry one.
disable_created_metrics()  # type: ignore[no-untyped-call]

# From a few milliseconds to an hour: short API calls and long batch jobs both land in a bucket.
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, float("inf"))

OVERFLOW_SIGNALS = Counter(
    "tidegate_capacity_overflow_total",
    "Times this process raised the overflow signal: eligible runs waited while every worker was full.",
)
CLAIMED_RUNS = Counter("tidegate_claimed_runs_total", "Runs this worker claimed, by queue.", ["queue"])
RUN_DURATION = Histogram(
    "tidegate_run_duration_seconds",
    "Attempts this worker settled: from the claim to the outcome, by task and outcome status.",
    ["task", "status"],
    buckets=DURATION_BUCKETS,
)
QUEUE_WAIT = Histogram(
    "tidegate_queue_wait_seconds",
    "Attempts this worker settled: how long the run had been due and queued before its claim, "
    "by task and outcome status.",
    ["task", "status"],
    buckets=DURATION_BUCKETS,
)


COLLECTORS = (OVERFLOW_SIGNALS, CLAIMED_RUNS, RUN_DURATION, QUEUE_WAIT)


class _Counted(Collector):
    """This process's worker metrics that have a sample: a server that runs no worker (`tidegate serve`)
    exports no empty per-worker family (a HELP and TYPE with no series reads as a broken exporter)."""

    def collect(self) -> Iterator[Metric]:
        for collector in COLLECTORS:
            yield from (family for family in collector.collect() if family.samples)


def include_in(registry: CollectorRegistry) -> None:
    """Expose this process's worker metrics through `registry` too (the same objects: no copy to drift)."""
    registry.register(_Counted())


def record_claims(runs: Sequence[ClaimedRun]) -> None:
    """One increment per queue a cycle claimed from, not per run: a drain claims thousands a second."""
    for queue, count in collections.Counter(run.queue for run in runs).items():
        CLAIMED_RUNS.labels(queue=queue).inc(count)


# The histograms' children by (task, status): `labels()` looks a child up under a lock each call,
# and every settled attempt observes two of them (a cost of a draining worker's loop thread).
_SETTLED: dict[tuple[str, str], tuple[Any, Any]] = {}


def record_attempt(run: ClaimedRun, status: str, seconds: float) -> None:
    """An attempt settled with `status` after `seconds` on this worker."""
    key = (run.task, status)
    children = _SETTLED.get(key)
    if children is None:
        children = _SETTLED.setdefault(
            key, (RUN_DURATION.labels(task=run.task, status=status), QUEUE_WAIT.labels(task=run.task, status=status))
        )
    duration, wait = children
    duration.observe(max(0.0, seconds))
    wait.observe(run.queued_seconds)


def serve_metrics(port: int, host: str) -> None:
    """Serve this process's metrics at http://HOST:PORT/metrics on a daemon thread."""
    start_http_server(port, addr=host)
