"""What every router of `/api/v1` shares: the prefix, the App behind a request, the error answers.

Each router module documents the same failures the same way, so the OpenAPI
document (and schemathesis, which holds every answer to it) sees one error
shape under one description per status.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Path, Request

from tidegate.api import schemas
from tidegate.api.errors import blame
from tidegate.app import App
from tidegate.bootstrap import Store
from tidegate.domain import names
from tidegate.domain.errors import RunNotFound
from tidegate.domain.model import RunRecord
from tidegate.engine.operators import runs as operator_runs

PREFIX = "/api/v1"
MAX_PAGE = 500  # the most rows one page of any listing returns

RunId = Annotated[str, Path(description="A run id, as returned by submit.", max_length=200)]

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


RUN_ERRORS = not_found("run")


def find_run(app: App, run_id: str) -> RunRecord:
    """The run a route names, or a 422 (malformed id, field run_id) or 404 (unknown id)."""
    with blame("run_id"):
        names.check_run_id(run_id)
    record = operator_runs.get_run(app.store, run_id)
    if record is None:
        raise RunNotFound(f"no run with id {run_id!r}")
    return record


def app_of(request: Request) -> App:
    app: App = request.app.state.tidegate
    return app


def declared_store(request: Request) -> Store:
    """The store, with the served app's queue and limit declarations written first (as every
    submit writes them: `App.enqueue` of no run), so that an operator can see, pause or limit a
    queue the code declares before any run of it was submitted. Written once per app."""
    app = app_of(request)
    app.enqueue([])
    return app.store
