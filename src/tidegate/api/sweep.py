"""`POST /api/v1/sweep`: recover stuck runs now, without a worker, as `tidegate sweep` does.

The engine's `sweep_now`: the sweep a worker's sweeper runs, once, in the
store's clock. With no worker left (the only one was killed) it is how an
operator gets runs past their lease re-queued (or failed, out of attempts)
and their slots freed.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from tidegate.api import verb_schemas as schemas
from tidegate.api.routing import ERRORS, PREFIX, app_of
from tidegate.api.security import can_write
from tidegate.engine.operators.sweep import sweep_now

router = APIRouter(prefix=PREFIX, tags=["operators"])


@router.post(
    "/sweep", response_model=schemas.SweepResult, responses=ERRORS, dependencies=[can_write],
    summary="Recover stuck runs now: re-queue (or fail) runs whose lease expired, free leaked slots",
)  # fmt: skip
def sweep(request: Request) -> dict[str, Any]:
    report = sweep_now(app_of(request).store, "api-sweep")
    if report is None:
        return {
            "swept": False,
            "requeued": [],
            "failed": [],
            "resumed": [],
            "leaks_repaired": 0,
            "step_slots_expired": 0,
            "unapplied": {},
        }
    return {
        "swept": True,
        "requeued": report.requeued,
        "failed": report.failed,
        "resumed": report.resumed,
        "leaks_repaired": report.leaks_repaired,
        "step_slots_expired": report.step_slots_expired,
        "unapplied": report.unapplied,
    }
