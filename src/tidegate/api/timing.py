"""ASGI middleware: how long each HTTP request took, by method, route template and status.

Timed from the request's arrival to the end of its response body, so a
streamed answer counts whole. The route label is the matched template
(`/api/v1/runs/{run_id}`), never the raw path: ids and a fuzzer's garbage
would otherwise make a label value each. Unmatched paths share one label.
"""

from __future__ import annotations

import time

from prometheus_client import Histogram
from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

UNMATCHED = "unmatched"


class RequestTiming:
    """Observes every HTTP request into `histogram` (labels: method, route, status)."""

    def __init__(self, app: ASGIApp, histogram: Histogram) -> None:
        self.app = app
        self.histogram = histogram

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        began = time.perf_counter()  # a latency on this server's own clock: nothing crosses processes
        status = 500  # what the client gets if the app raises before answering

        async def timed(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, timed)
        finally:
            route = scope.get("route")
            template = route.path if isinstance(route, BaseRoute) and hasattr(route, "path") else UNMATCHED
            self.histogram.labels(method=scope["method"], route=template, status=str(status)).observe(
                time.perf_counter() - began
            )
