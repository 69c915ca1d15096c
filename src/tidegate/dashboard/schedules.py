"""`/schedules`: every stored schedule (task, cron, zone, next and last fire, paused), pause and resume.

The list, the pause and the resume are `engine.operators.schedules`, as `tidegate
schedules` and `app.pause_schedule` use them (the schedules workers declared; a resume
fires from the next tick on).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from tidegate.dashboard.access import FormDep, ViewerDep
from tidegate.dashboard.render import app_of, now_of, page, redirect
from tidegate.domain.errors import InvalidArgument, ScheduleNotFound, TidegateError
from tidegate.domain.schedules import check_schedule_name
from tidegate.engine.operators import schedules as operator_schedules

router = APIRouter()


def _render(request: Request, viewer: Any, status: int = 200, error: str | None = None) -> Response:
    schedules = operator_schedules.list_schedules(app_of(request).store)
    return page(request, "schedules.html", viewer, status, schedules=schedules, error=error)


@router.get("/schedules")
def schedules_page(request: Request, viewer: ViewerDep) -> Response:
    return _render(request, viewer)


@router.post("/schedules/{name}/{action}")
async def pause_or_resume(name: str, action: str, request: Request, viewer: ViewerDep, form: FormDep) -> Response:
    store = app_of(request).store

    def work() -> None:
        if action not in ("pause", "resume"):
            raise InvalidArgument(f"{action!r} is neither pause nor resume")
        operator_schedules.set_paused(store, check_schedule_name(name), action == "pause", now_of(request))

    try:
        await run_in_threadpool(work)
    except TidegateError as error:
        status = 404 if isinstance(error, ScheduleNotFound) else 422
        return await run_in_threadpool(_render, request, viewer, status, str(error))
    return redirect(request, "/schedules")
