"""What every router of `/api/v1` shares: the prefix, the App behind a request, the error answers.

Each router module documents the same failures the same way, so the OpenAPI
document (and schemathesis, which holds every answer to it) sees one error
shape under one description per status.
"""

from __future__ import annotations

from typing import Any

from fastapi import Request

from tidegate.api import schemas
from tidegate.app import App

PREFIX = "/api/v1"

ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": schemas.Error, "description": "A valid bearer token is required."},
    403: {
        "model": schemas.Error,
        "description": "Refused: a read token asked to change, or (with no token) a "
        "request not addressed to loopback or sent from another site's page.",
    },
    413: {"model": schemas.Error, "description": "The body is over the size limit."},
    422: {"model": schemas.Error, "description": "A value is not acceptable; `field` names it. Nothing was changed."},
    503: {"model": schemas.Error, "description": "The store cannot be reached."},
}


def not_found(what: str) -> dict[int | str, dict[str, Any]]:
    """The 404 answer of a route that names one thing (a run, a queue, a pool)."""
    return {404: {"model": schemas.Error, "description": f"No such {what}."}}


def app_of(request: Request) -> App:
    app: App = request.app.state.tidegate
    return app
