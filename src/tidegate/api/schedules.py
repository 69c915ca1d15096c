"""`/api/v1/schedules`: the stored schedules and when they fire; pausing, resuming or removing one.

The same verbs `tidegate schedules` runs: `Store.list_schedules`, the engine's
`set_paused` (a resume fires from the first tick after now, by the app's
clock: the paused ticks are not made up) and `Store.remove_schedule`. A pause
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
from tidegate.bootstrap import Store
from tidegate.domain.errors import ScheduleNotFound
from tidegate.domain.schedules import ScheduleRecord, check_schedule_name
from tidegate.engine.schedules import set_paused, wall_now

router = APIRouter(prefix=PREFIX, tags=["schedules"])
ScheduleName = Annotated[str, Path(description="A stored schedule's name.", max_length=200)]
_ONE = {**ERRORS, **not_found("schedule")}


@router.get(
    "/schedules", response_model=schemas.ScheduleList, responses=ERRORS, dependencies=[can_read],
    summary="Stored schedules: task, cron, time zone, next and last fire, paused",
)  # fmt: skip
def list_schedules(request: Request) -> dict[str, Any]:
    return {"schedules": [record.document() for record in app_of(request).store.list_schedules()]}


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
    app_of(request).store.remove_schedule(name)
    return {"name": name, "removed": True}


def _set_paused(request: Request, name: str, *, paused: bool) -> dict[str, Any]:
    app = app_of(request)
    with blame("name"):
        check_schedule_name(name)
    changed = set_paused(app.store, name, paused, wall_now(app.clock))
    return {**_find(app.store, name).document(), "changed": changed}


def _find(store: Store, name: str) -> ScheduleRecord:
    found = next((record for record in store.list_schedules() if record.name == name), None)
    if found is None:  # removed between the change and this read
        raise ScheduleNotFound(f"no schedule named {name!r} (GET /api/v1/schedules lists them)")
    return found
