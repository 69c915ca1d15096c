"""`/healthz` and `/readyz` at the root, where probes look for them; neither writes anything.

`/healthz` answers while the process serves (and needs no token, so an
orchestrator can probe it); `/readyz` also needs the store to answer a read.
"""

from __future__ import annotations

from fastapi import APIRouter, Request

from tidegate.api import schemas
from tidegate.api.security import can_read
from tidegate.app import App
from tidegate.engine.operators.schema import schema_version

router = APIRouter(tags=["probes"])


@router.get("/healthz", response_model=schemas.Probe, summary="The process answers")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get(
    "/readyz", response_model=schemas.Probe, dependencies=[can_read], summary="The store answers a read",
    responses={
        401: {"model": schemas.Error, "description": "A valid bearer token is required."},
        403: {"model": schemas.Error, "description": "With no token: a request not addressed to loopback."},
        503: {"model": schemas.Error, "description": "The store cannot be reached."},
    },
)  # fmt: skip
def readyz(request: Request) -> dict[str, str]:
    app: App = request.app.state.tidegate
    schema_version(app.store)
    return {"status": "ok"}
