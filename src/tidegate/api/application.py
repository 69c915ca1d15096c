"""The ASGI application: routes, error handlers, the body limit and the tokens, put together.

`tidegate serve` runs it on uvicorn; `App.asgi()` returns it for mounting in
another ASGI service. It holds no state of its own: the App (and through it
the store) is where runs live.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from functools import partial
from typing import Any

from fastapi import FastAPI

from tidegate import dashboard
from tidegate.api import (
    docs,
    doctor,
    errors,
    limits,
    metrics,
    operators,
    pools,
    probes,
    queues,
    rates,
    routing,
    runs,
    schedules,
    security,
    stream,
    sweep,
    tasks,
)
from tidegate.api.access_log import AccessLog
from tidegate.api.bodies import OPTIONS_ROOM, BodyLimit
from tidegate.api.group_commit import GroupCommit
from tidegate.api.metrics import ServerMetrics
from tidegate.api.origins import SameOrigin
from tidegate.api.refusals import Refusals
from tidegate.api.security import Tokens, can_read
from tidegate.api.stream import EventStreams
from tidegate.api.submission import Known, store_each
from tidegate.api.throttle import FailureThrottle
from tidegate.api.timing import RequestTiming
from tidegate.app import App, settings

OPENAPI_URL = f"{routing.PREFIX}/openapi.json"
DOCS_URL = "/api/docs"


def create_api(app: App, *, tokens: Tokens | None = None, owns_app: bool = False, access_log: bool = False) -> FastAPI:
    """The HTTP API over `app`; tokens default to TIDEGATE_API_TOKEN / TIDEGATE_API_READ_TOKEN.

    `owns_app`: the server's shutdown closes the app (its store's connections), as `serve`
    wants; an API mounted in another service leaves the app to whoever made it. `access_log`:
    a line per request on `tidegate.access` (api/access_log.py), as `serve` writes; a host
    service has its own.
    """
    api = FastAPI(
        lifespan=_closing(app) if owns_app else None,
        title="tidegate",
        summary="Durable tasks and workflows with concurrency control you can reason about.",
        version="1",
        openapi_url=None,  # served below, behind the tokens like every route but /healthz
        docs_url=None,
        redoc_url=None,
    )
    api.state.tidegate = app
    api.state.tokens = tokens if tokens is not None else Tokens.from_environment()
    api.state.throttle = FailureThrottle(app.clock.monotonic)
    api.state.metrics = ServerMetrics(lambda: app.store)
    api.state.refusals = Refusals[Known]()
    api.state.group_commit = GroupCommit(partial(store_each, app, api.state.metrics))
    api.state.event_streams = EventStreams.from_environment(lambda: app.store)
    body_timeout = settings.duration_setting("TIDEGATE_BODY_TIMEOUT")
    api.add_middleware(BodyLimit, max_bytes=app.max_payload + OPTIONS_ROOM, timeout=body_timeout)
    api.add_middleware(SameOrigin)  # every change, the API's and the dashboard's forms: from its own pages only
    api.add_middleware(RequestTiming, histogram=api.state.metrics.latency)  # a 413 is timed too
    if access_log:
        api.add_middleware(AccessLog)  # inside the request's span, so its line has the span's ids
    _trace_routes(api)  # outermost: a request's span covers everything it cost
    errors.install(api)
    api.include_router(probes.router)
    api.include_router(runs.router)
    api.include_router(operators.router)
    api.include_router(queues.router)
    api.include_router(pools.router)
    api.include_router(rates.router)
    api.include_router(limits.router)
    api.include_router(tasks.router)
    api.include_router(schedules.router)
    api.include_router(sweep.router)
    api.include_router(doctor.router)
    api.include_router(metrics.router)
    api.include_router(stream.router)
    _document(api)
    dashboard.install(api, grant=security.grant, events=stream.stream_events)  # the web pages at /
    return api


def _trace_routes(api: FastAPI) -> None:
    """Each request as a span of the standard ASGI instrumentation, when it is installed (it is optional:
    `pip install opentelemetry-instrumentation-asgi`); a submit's producer span is its child."""
    try:
        from opentelemetry.instrumentation.asgi import OpenTelemetryMiddleware
    except ImportError:
        return
    api.add_middleware(OpenTelemetryMiddleware)


def _closing(app: App) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    @asynccontextmanager
    async def lifespan(api: FastAPI) -> AsyncIterator[None]:
        yield
        app.close()

    return lifespan


def _document(api: FastAPI) -> None:
    """The OpenAPI document and its interactive docs, readable by any token (none on loopback)."""

    @api.get(OPENAPI_URL, include_in_schema=False, dependencies=[can_read])
    async def openapi() -> dict[str, Any]:
        return api.openapi()

    docs.install(api, DOCS_URL, OPENAPI_URL)
