"""`GET /api/v1/doctor`: the findings of `tidegate doctor`, from the served app's store (`engine.operators.doctor`)."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field

from tidegate.api.routing import ERRORS, PREFIX, app_of
from tidegate.api.security import can_read
from tidegate.app import settings
from tidegate.engine.operators.doctor import diagnose

router = APIRouter(prefix=PREFIX, tags=["operators"])

LevelName = Literal["pass", "warn", "fail"]


class Finding(BaseModel):
    check: str = Field(
        description="store, schema, clock, workers, queues, pools, stuck, schedules, retention, connections"
    )
    level: LevelName
    message: str


class Diagnosis(BaseModel):
    """Every check's finding; `level` is the worst of them (what `tidegate doctor`'s exit code says)."""

    level: LevelName
    findings: list[Finding]


@router.get(
    "/doctor", response_model=Diagnosis, responses=ERRORS, dependencies=[can_read],
    summary="Check the store, its schema and clock, workers, unserved queues, pools, stuck runs, schedules, retention",
)  # fmt: skip
def doctor(request: Request) -> dict[str, Any]:
    app = app_of(request)
    return diagnose(lambda: app.store, app.clock, settings.duration_setting("TIDEGATE_RETENTION")).document()
