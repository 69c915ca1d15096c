"""`/api/v1/queues`: each declared queue (limits, counts, paused), and pausing or resuming one.

A pause keeps a queue's runs queued and claims none of them until resumed;
submits to it still queue. It is stored with the rules and audited, so every
worker (on any machine) sees it at its next claim, and it survives restarts.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Request

from tidegate.api import control_schemas as schemas
from tidegate.api.errors import blame
from tidegate.api.routing import ERRORS, PREFIX, declared_store, not_found
from tidegate.api.security import can_read, can_write
from tidegate.engine.operators import queues
from tidegate.engine.operators.queues import QueueSummary

router = APIRouter(prefix=PREFIX, tags=["queues"])
QueueName = Annotated[str, Path(description="A declared queue's name.", max_length=200)]
_ONE = {**ERRORS, **not_found("queue")}


def _queue(found: QueueSummary) -> dict[str, Any]:
    config = found.config
    partition = config.concurrency.partition
    limits = {
        "global_limit": found.limit,
        "code_global_limit": config.concurrency.global_limit,
        "local_limit": config.concurrency.local_limit,
        "max_workers": config.max_workers,
        "max_active": config.max_active,
        "partitioned_by": (["kind"] if partition.by_kind else [])
        + (["*"] if partition.by_args == () else list(partition.by_args or ())),
        "ordering": config.ordering,
        "dispatch_deadline_seconds": config.dispatch_deadline,
    }
    counts = found.counts
    return {
        "name": found.name,
        "paused": found.paused,
        "limits": limits,
        "queued": counts.queued,
        "running": counts.running,
        "blocked": found.blocked,
    }


@router.get(
    "/queues", response_model=schemas.QueueList, responses=ERRORS, dependencies=[can_read], summary="List queues"
)
def list_queues(request: Request) -> dict[str, Any]:
    return {"queues": [_queue(found) for found in queues.summaries(declared_store(request))]}


@router.post(
    "/queues/{name}/pause", response_model=schemas.Queue, responses=_ONE, dependencies=[can_write],
    summary="Pause a queue: none of its runs starts until resumed",
)  # fmt: skip
def pause_queue(name: QueueName, request: Request) -> dict[str, Any]:
    return _set_paused(request, name, paused=True)


@router.post(
    "/queues/{name}/resume", response_model=schemas.Queue, responses=_ONE, dependencies=[can_write],
    summary="Resume a paused queue",
)  # fmt: skip
def resume_queue(name: QueueName, request: Request) -> dict[str, Any]:
    return _set_paused(request, name, paused=False)


def _set_paused(request: Request, name: str, *, paused: bool) -> dict[str, Any]:
    store = declared_store(request)
    with blame("name"):
        if paused:
            queues.pause(store, name)
        else:
            queues.resume(store, name)
    return _queue(queues.summary(store, name))
