"""The ASGI application: routes, error handlers, the body limit and the tokens, put together.

`tidegate serve` runs it on uvicorn; `App.asgi()` returns it for mounting in
another ASGI service. It holds no state of its own: the App (and through it
the store) is where runs live.
"""

from __future__ import annotations

from fastapi import FastAPI

from tidegate.api import errors, probes, runs
from tidegate.api.bodies import OPTIONS_ROOM, BodyLimit
from tidegate.api.security import Tokens
from tidegate.app import App

OPENAPI_URL = f"{runs.PREFIX}/openapi.json"
DOCS_URL = "/api/docs"


def create_api(app: App, *, tokens: Tokens | None = None) -> FastAPI:
    """The HTTP API over `app`; tokens default to TIDEGATE_API_TOKEN / TIDEGATE_API_READ_TOKEN."""
    api = FastAPI(
        title="tidegate",
        summary="Durable tasks and workflows with concurrency control you can reason about.",
        version="1",
        openapi_url=OPENAPI_URL,
        docs_url=DOCS_URL,
        redoc_url=None,
    )
    api.state.tidegate = app
    api.state.tokens = tokens if tokens is not None else Tokens.from_environment()
    api.add_middleware(BodyLimit, max_bytes=app.max_payload + OPTIONS_ROOM)
    errors.install(api)
    api.include_router(probes.router)
    api.include_router(runs.router)
    return api
