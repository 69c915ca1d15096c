"""`/api/v1/schedules`: the stored schedules and when they fire; pausing, resuming or removing one.

The same services `tidegate schedules` runs (`engine.operators.schedules`): the
list, `set_paused` (a resume fires from the first tick after now, by the app's
clock: the paused ticks are not made up) and the removal. A pause
is stored apart from the declaration, so a worker restarting with the same
code never undoes it.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Request

from tidegate.api import verb_schemas as schemas
from tidegate.api.errors import blame
from tidegate.api.routing import ERRORS, PREFIX, app_of, not_found
from tidegate.api.security import can_read, can_write
from tidegate.domain.clock import wall_now
from tidegate.domain.errors import ScheduleNotFound
from tidegate.domain.schedules import check_schedule_name
from tidegate.engine.operators import schedules

router = APIRouter(prefix=PREFIX, tags=["schedules"])
ScheduleName = Annotated[str, Path(description="A stored schedule's name.", max_length=200)]
_ONE = {**ERRORS, **not_found("schedule")}


@router.get(
    "/schedules", response_model=schemas.ScheduleList, responses=ERRORS, dependencies=[can_read],
    summary="Stored schedules: task, cron, time zone, next and last fire, paused",
)  # fmt: skip
def list_schedules(request: Request) -> dict[str, Any]:
    return {"schedules": [record.document() for record in schedules.list_schedules(app_of(request).store)]}


@router.post(
    "/schedules/{name}/pause", response_model=schemas.ScheduleChange, responses=_ONE, dependencies=[can_write],
    summary="Pause a schedule: it fires nothing until resumed (kept across worker restarts)",
)  # fmt: skip
def pause_schedule(name: ScheduleName, request: Request) -> dict[str, Any]:
    return _set_paused(request, name, paused=True)


@router.post(
    "/schedules/{name}/resume", response_model=schemas.ScheduleChange, responses=_ONE, dependencies=[can_write],
    summary="Resume a paused schedule from its next tick on",
)  # fmt: skip
def resume_schedule(name: ScheduleName, request: Request) -> dict[str, Any]:
    return _set_paused(request, name, paused=False)


@router.delete(
    "/schedules/{name}", response_model=schemas.ScheduleRemoved, responses=_ONE, dependencies=[can_write],
    summary="Delete a stored schedule (its runs stay)",
)  # fmt: skip
def remove_schedule(name: ScheduleName, request: Request) -> dict[str, Any]:
    with blame("name"):
        check_schedule_name(name)
    schedules.remove_schedule(app_of(request).store, name)
    return {"name": name, "removed": True}


def _set_paused(request: Request, name: str, *, paused: bool) -> dict[str, Any]:
    app = app_of(request)
    with blame("name"):
        check_schedule_name(name)
    changed = schedules.set_paused(app.store, name, paused, wall_now(app.clock))
    found = schedules.find_schedule(app.store, name)
    if found is None:  # removed between the change and this read
        raise ScheduleNotFound(f"no schedule named {name!r} (GET /api/v1/schedules lists them)")
    return {**found.document(), "changed": changed}
