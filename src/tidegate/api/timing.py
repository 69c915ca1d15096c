"""ASGI middleware: how long each HTTP request took, by method, route template and status.

Timed from the request's arrival to the end of its response body, so a
streamed answer counts whole. The route label is the matched template
(`/api/v1/runs/{run_id}`), never the raw path: ids and a fuzzer's garbage
would otherwise make a label value each. Unmatched paths share one label.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod

from prometheus_client import Histogram
from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

UNMATCHED = "unmatched"


class Timed(ABC):
    """ASGI middleware base: `answered(scope, status, seconds)` once each HTTP request's answer has
    ended (or the app has raised: status 500), timed on this server's own clock. Written once for
    the request histogram (`RequestTiming`) and the access log (`api/access_log.py`)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        began = time.perf_counter()  # a duration on this server's own clock: nothing crosses processes
        status = 500  # what the client gets if the app raises before answering

        async def noted(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, noted)
        finally:
            self.answered(scope, status, time.perf_counter() - began)

    @abstractmethod
    def answered(self, scope: Scope, status: int, seconds: float) -> None:
        """What to do with one request's answer: each middleware says."""


class RequestTiming(Timed):
    """Observes every HTTP request into `histogram` (labels: method, route, status)."""

    def __init__(self, app: ASGIApp, histogram: Histogram) -> None:
        super().__init__(app)
        self.histogram = histogram

    def answered(self, scope: Scope, status: int, seconds: float) -> None:
        route = scope.get("route")
        template = route.path if isinstance(route, BaseRoute) and hasattr(route, "path") else UNMATCHED
        self.histogram.labels(method=scope["method"], route=template, status=str(status)).observe(seconds)
