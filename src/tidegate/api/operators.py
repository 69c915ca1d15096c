"""`/api/v1`: the operator routes: why a run waits, retry a run, the queue, the workers.

`why` renders `engine.operators.why.explain`, the same explanation `tidegate queue why`
prints. Endpoints are plain functions, run in FastAPI's thread pool, so store
calls never block the event loop.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request

from tidegate.api import operator_schemas as schemas
from tidegate.api.errors import blame
from tidegate.api.routing import ERRORS as _ERRORS
from tidegate.api.routing import MAX_PAGE, PREFIX, RUN_ERRORS, RunId, find_run
from tidegate.api.routing import app_of as _app
from tidegate.api.schemas import Error
from tidegate.api.security import can_read, can_write
from tidegate.api.submission import REJECTED
from tidegate.domain import names
from tidegate.domain.model import HolderRecord, WorkerRecord, host_and_pid
from tidegate.engine.operators import runs as operator_runs
from tidegate.engine.operators.queues import claim_order
from tidegate.engine.operators.why import Explanation, ScopeCheck, explain
from tidegate.engine.operators.workers import list_workers

_RETRY_ERRORS: dict[int | str, dict[str, Any]] = {
    **_ERRORS,
    **RUN_ERRORS,
    409: {"model": Error, "description": "Only a failed or canceled run can be retried. Nothing was changed."},
    **REJECTED,  # a retried run is active again: it meets the admission ceilings as a submit does
}

router = APIRouter(prefix=PREFIX, tags=["operators"])


@router.get(
    "/runs/{run_id}/why", response_model=schemas.Why, responses={**_ERRORS, **RUN_ERRORS},
    dependencies=[can_read], summary="Why a run waits: every layer, its holders, an ETA",
)  # fmt: skip
def why(run_id: RunId, request: Request) -> dict[str, Any]:
    app = _app(request)
    record = find_run(app, run_id)
    return _why(explain(app.store, record.id))


@router.post(
    "/runs/{run_id}/retry", response_model=schemas.RetryResult, responses=_RETRY_ERRORS,
    dependencies=[can_write], summary="Give a failed or canceled run a new attempt",
)  # fmt: skip
def retry_run(run_id: RunId, request: Request) -> dict[str, Any]:
    app = _app(request)
    with blame("run_id"):
        names.check_run_id(run_id)
    record = operator_runs.retry_run(app.store, run_id)
    return {"id": record.id, "status": record.status, "attempt": record.attempt, "max_attempts": record.max_attempts}


@router.get(
    "/queue", response_model=schemas.QueuePage, responses=_ERRORS, dependencies=[can_read],
    summary="Queued runs in claim order",
)  # fmt: skip
def queued_runs(
    request: Request,
    queue: Annotated[str | None, Query(max_length=200)] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE, description="At most this many, from the head.")] = 50,
) -> dict[str, Any]:
    with blame("queue"):
        queue = None if queue is None else names.check_name("queue", queue)
    store = _app(request).store
    waiting, total = claim_order(store, queue, limit)
    listed = [
        {
            "position": each.position,
            "id": each.run.id,
            "task": each.run.task,
            "queue": each.run.queue,
            "priority": each.run.priority,
            "queued_since": each.run.scheduled_at,
            "block_reason": each.verdict.reason(),
        }
        for each in waiting
    ]
    return {"runs": listed, "total": total}


@router.get(
    "/workers", response_model=schemas.WorkerList, responses=_ERRORS, dependencies=[can_read],
    summary="Registered workers: capacity, busy, queues, heartbeat age",
)  # fmt: skip
def workers(request: Request) -> dict[str, Any]:
    registry = list_workers(_app(request).store)
    return {"workers": [_worker(worker) for worker in registry]}


def _worker(worker: WorkerRecord) -> dict[str, Any]:
    host, pid = host_and_pid(worker.id)
    return {**{name: getattr(worker, name) for name in WorkerRecord.__dataclass_fields__}, "host": host, "pid": pid}


def _why(explanation: Explanation) -> dict[str, Any]:
    run = explanation.run
    return {
        "id": run.id,
        "status": run.status,
        "queue": run.queue,
        "priority": run.priority,
        "position": explanation.position,
        "queued_in_queue": explanation.queued_in_queue,
        "scheduled_at": run.scheduled_at,
        "layers": [_layer(check, explanation.holders.get(check.scope, [])) for check in explanation.checks],
        "blocked_by": [check.scope for check in explanation.blocking],
        "eta_seconds": explanation.eta_seconds,
        "waiting_for": explanation.waiting_for,
        "resumes_when": None if explanation.resumes is None else ("any" if run.wait_any else "all"),
        "released": run.wait_released or [],
        "kept": run.wait_kept or [],
        "paused": explanation.paused,
    }


def _layer(check: ScopeCheck, holders: list[HolderRecord]) -> dict[str, Any]:
    return {
        "layer": check.layer,
        "scope": check.scope,
        "label": check.label,
        "used": check.used,
        "limit": check.limit,
        "slots": check.slots,
        "ok": check.ok,
        "per": None if check.rate is None else check.rate.per,  # a rate's period (s)
        "next_allowed_in": None if check.rate is None or check.rate.ok else check.rate.allowed_in,
        "holders": [
            {
                "run_id": holder.run_id,
                "step_key": holder.step_key,
                "slots": holder.slots,
                "worker_id": holder.worker_id,
                "claimed_at": holder.claimed_at,
                "expires_at": holder.expires_at,
            }
            for holder in holders
        ],
    }
