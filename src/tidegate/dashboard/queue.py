"""`/queue`: queued runs in claim order with why each waits; cancel one (write access)."""

from __future__ import annotations

from urllib.parse import urlencode

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from tidegate.dashboard import data
from tidegate.dashboard.access import FormDep, ViewerDep
from tidegate.dashboard.render import app_of, page, redirect
from tidegate.domain import names
from tidegate.domain.errors import TidegateError
from tidegate.engine.operators.runs import cancel_run

router = APIRouter()


@router.get("/queue")
def queue_page(request: Request, viewer: ViewerDep, queue: str | None = None) -> Response:
    store = data.declared(app_of(request))
    summaries = data.queue_summaries(store)
    try:
        chosen = data.check_queue(queue)
    except TidegateError as error:
        return page(
            request, "queue.html", viewer, 422, error=str(error), rows=[], total=0, queues=summaries, chosen=None
        )
    rows, total = data.queued(store, chosen)
    return page(request, "queue.html", viewer, rows=rows, total=total, queues=summaries, chosen=chosen, error=None)


@router.post("/queue/cancel")
async def cancel(request: Request, form: FormDep) -> Response:
    run_id = form.get("run_id", "")
    store = app_of(request).store

    def work() -> None:
        names.check_run_id(run_id)
        cancel_run(store, run_id)

    await run_in_threadpool(work)
    back = "/queue" + (f"?{urlencode({'queue': form['queue']})}" if form.get("queue") else "")
    return redirect(request, back)
