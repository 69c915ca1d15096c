"""`/`: runs by status, completions per minute over the last hour, the scopes blocking the most runs,
workers alive and whether the fleet overflows."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from tidegate.dashboard import chart, data
from tidegate.dashboard.access import ViewerDep
from tidegate.dashboard.render import app_of, now_of, page
from tidegate.domain.model import RunStatus
from tidegate.engine.operators.workers import list_workers

router = APIRouter()


@router.get("/")
def overview_page(request: Request, viewer: ViewerDep) -> Response:
    store = app_of(request).store
    counts = data.status_counts(store)
    per_minute = data.completions_per_minute(store)
    workers = list_workers(store)
    live = [worker for worker in workers if worker.live]
    return page(
        request, "overview.html", viewer, counts=counts, statuses=[status.value for status in RunStatus],
        chart=chart.bars(per_minute, "Runs ended per minute over the last hour"), ended_hour=sum(per_minute),
        blocking=data.top_blocking(store), live=live,
        overflow=data.last_overflow(store, now_of(request)),
        busy=sum(worker.busy for worker in live), capacity=sum(worker.capacity for worker in live),
    )  # fmt: skip
