"""`/limits`: every scope with used/limit and where the limit comes from; live changes with a dry run.

Targets, validation, the preview ("unblocks N queued runs") and the audited
change are `engine.operators.limits`, exactly as `PUT /api/v1/limits` and `tidegate
limits set` use them; pause and resume are `engine.operators.queues`.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from tidegate.dashboard import data
from tidegate.dashboard.access import FormDep, ViewerDep
from tidegate.dashboard.render import app_of, page, redirect
from tidegate.domain.errors import InvalidArgument, TidegateError
from tidegate.domain.model import EventType
from tidegate.engine.operators import events, limits, queues
from tidegate.engine.operators.limit_table import limit_table
from tidegate.engine.operators.limits import LimitPreview

router = APIRouter()
HISTORY = 50  # audit rows shown


def _render(request: Request, viewer: Any, status: int = 200, **extra: Any) -> Response:
    store = data.declared(app_of(request))
    table = limit_table(store)
    # A rate window's `used` is the cost its state counts, not holder rows: it has none to list.
    holders = {
        row.target: limits.scope_holders(store, row.target) for row in table.limits if row.used and row.per is None
    }
    context = {"preview": None, "resetting": False, "error": None, "target": "", "limit": "", **extra}
    return page(
        request, "limits.html", viewer, status, targets=table.limits, ceilings=table.ceilings, holders=holders,
        queues=data.queue_summaries(store), history=events.latest_events(store, EventType.LIMIT_CHANGED.value, HISTORY),
        **context,
    )  # fmt: skip


@router.get("/limits")
def limits_page(request: Request, viewer: ViewerDep) -> Response:
    return _render(request, viewer)


@router.post("/limits/preview")
async def preview(request: Request, viewer: ViewerDep, form: FormDep) -> Response:
    """What a set (or, with `reset`, a reset) would do, and a button to confirm it: nothing changes yet."""
    target, text, reset = form.get("target", "").strip(), form.get("limit", ""), form.get("reset") == "1"
    store = data.declared(app_of(request))

    def work() -> LimitPreview:
        return limits.preview(store, target, None if reset else limits.parse_limit(text, "limit"), reset=reset)

    try:
        shown = await run_in_threadpool(work)
    except TidegateError as error:
        return await run_in_threadpool(_render, request, viewer, 422, error=str(error), target=target, limit=text)
    return await run_in_threadpool(
        _render, request, viewer, preview=shown, resetting=reset, target=shown.target, limit="" if reset else text
    )


@router.post("/limits/set")
async def set_limit(request: Request, viewer: ViewerDep, form: FormDep) -> Response:
    target, text = form.get("target", "").strip(), form.get("limit", "")
    store = data.declared(app_of(request))
    try:
        await run_in_threadpool(lambda: limits.set_limit(store, target, limits.parse_limit(text, "limit")))
    except TidegateError as error:
        return await run_in_threadpool(_render, request, viewer, 422, error=str(error), target=target, limit=text)
    return redirect(request, "/limits")


@router.post("/limits/reset")
async def reset_limit(request: Request, viewer: ViewerDep, form: FormDep) -> Response:
    store = data.declared(app_of(request))
    try:
        await run_in_threadpool(lambda: limits.reset_limits(store, form.get("target", "").strip()))
    except TidegateError as error:
        return await run_in_threadpool(_render, request, viewer, 422, error=str(error))
    return redirect(request, "/limits")


@router.post("/queues/{name}/{action}")
async def pause_or_resume(name: str, action: str, request: Request, viewer: ViewerDep, form: FormDep) -> Response:
    store = data.declared(app_of(request))
    change = queues.pause if action == "pause" else queues.resume if action == "resume" else None
    try:
        if change is None:
            raise InvalidArgument(f"{action!r} is neither pause nor resume")
        await run_in_threadpool(change, store, name)
    except TidegateError as error:
        return await run_in_threadpool(_render, request, viewer, 422, error=str(error))
    return redirect(request, "/limits#queues")
