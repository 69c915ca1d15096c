"""`GET /metrics` (at the root, where Prometheus looks): the fleet's gauges and this server's own counters.

Each API has its own registry, so two APIs in one process (tests, an app
mounting two) never share or clash over counters: the fleet collector
(`fleet.py`, read from the store at scrape time), what this server saw
(runs submitted and admission rejections per queue, HTTP latency per route
and status, recorded by `timing.py`), and the counters of the workers running
in this process (worker/metrics.py: the same process-wide objects that
`tidegate worker --metrics-port` serves). The route follows the read tokens like
every other read, and its store reads run in the thread pool.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from fastapi import APIRouter, Request, Response
from fastapi.responses import PlainTextResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest

from tidegate.api.documented import READ_ERRORS
from tidegate.api.fleet import FleetCollector
from tidegate.api.security import can_read
from tidegate.bootstrap import Store
from tidegate.domain.errors import AdmissionRejected
from tidegate.domain.model import NewRun
from tidegate.worker import metrics as worker_metrics

Answer = TypeVar("Answer")

# A rejection or a submit takes milliseconds; a slow store or a stream far more.
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, float("inf"))
ALL_QUEUES = "*"  # the queue label of a rejection by the ceiling over all queues


class ServerMetrics:
    """The registry `/metrics` exposes, and the counters this server process keeps."""

    def __init__(self, store: Callable[[], Store]) -> None:
        self.registry = CollectorRegistry()  # no auto-describe: it would read the store now
        self.registry.register(FleetCollector(store))
        worker_metrics.include_in(self.registry)
        self.submitted = Counter(
            "tidegate_submitted_runs_total", "Runs this server stored, by queue.", ["queue"], registry=self.registry
        )
        self.rejected = Counter(
            "tidegate_admission_rejections_total",
            f"Submits this server answered 429, by the queue whose ceiling refused ({ALL_QUEUES}: all queues').",
            ["queue"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "tidegate_http_request_duration_seconds",
            "HTTP requests this server answered, by method, route template and status.",
            ["method", "route", "status"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )

    def counting_submits(self, submit: Callable[[], list[Answer]]) -> list[Answer]:
        """Call `submit`, counting the runs it stores (its answers that are a `NewRun`: not a
        duplicate of a run holding a key) or the ceiling that refuses them."""
        try:
            answers = submit()
        except AdmissionRejected as rejected:
            self.count_rejection(rejected)
            raise
        self.count_stored([answer for answer in answers if isinstance(answer, NewRun)])
        return answers

    def count_stored(self, runs: list[NewRun]) -> None:
        for run in runs:
            self.submitted.labels(queue=run.queue).inc()

    def count_rejection(self, rejected: AdmissionRejected) -> None:
        self.rejected.labels(queue=ceiling_queue(rejected)).inc()


def ceiling_queue(rejected: AdmissionRejected) -> str:
    """The queue whose ceiling refused, or ALL_QUEUES.

    A ceiling names `queue NAME` or `all queues` (domain/transitions.py: Ceiling.rejection)."""
    return rejected.scope.removeprefix("queue ") if rejected.scope.startswith("queue ") else ALL_QUEUES


def server_metrics(request: Request) -> ServerMetrics:
    metrics: ServerMetrics = request.app.state.metrics
    return metrics


router = APIRouter(tags=["metrics"])
_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"content": {CONTENT_TYPE_LATEST.split(";")[0]: {"schema": {"type": "string"}}}, "description": "Metrics."},
    **READ_ERRORS,
}


@router.get(
    "/metrics", response_class=PlainTextResponse, responses=_RESPONSES, dependencies=[can_read],
    summary="Prometheus metrics: the fleet (from the store) and this server",
)  # fmt: skip
def metrics(request: Request) -> Response:
    return Response(generate_latest(server_metrics(request).registry), media_type=CONTENT_TYPE_LATEST)
