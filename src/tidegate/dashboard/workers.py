"""`/workers`: each registered worker (rank, capacity, busy, queues, heartbeat age), fill order, overflow.

`engine.operators.workers`, as `GET /api/v1/workers` and `tidegate workers` read it. Overflow is
the last CapacityOverflow a worker raised (`engine.operators.events`), the signal an autoscaler gets.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from tidegate.dashboard import data
from tidegate.dashboard.access import ViewerDep
from tidegate.dashboard.render import app_of, now_of, page
from tidegate.engine.operators.workers import list_workers

router = APIRouter()


@router.get("/workers")
def workers_page(request: Request, viewer: ViewerDep) -> Response:
    store = app_of(request).store
    workers = list_workers(store)
    return page(
        request, "workers.html", viewer, workers=workers, overflow=data.last_overflow(store, now_of(request)),
        fill_order=any(worker.fill_order for worker in workers if worker.live),
    )  # fmt: skip
