"""`/api/v1/runs`: submit (one or a batch), page through, show, events, cancel.

Endpoints are plain functions: FastAPI runs them in its thread pool, so a
store call (a database round trip, SQLite's busy wait) never blocks the
event loop that serves every other request. The single submit is the one
async route: it answers a repeated 429 on the loop and stores in the pool,
with the submits that arrive meanwhile (api/submission.py: submit_one).
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import islice
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response, status

from tidegate.api import schemas
from tidegate.api.errors import FieldError, blame
from tidegate.api.metrics import server_metrics
from tidegate.api.routing import ERRORS, MAX_PAGE, PREFIX, RUN_ERRORS, RunId, find_run
from tidegate.api.routing import app_of as _app
from tidegate.api.security import can_read, can_write, json_body
from tidegate.api.submission import REJECTED, Duplicate, Stored, submit, submit_one, submitted_fields
from tidegate.app import App
from tidegate.domain import names
from tidegate.domain.clock import wall_now
from tidegate.domain.durations import parse_duration
from tidegate.domain.errors import InvalidArgument
from tidegate.domain.model import RunRecord, RunStatus, WorkerRecord
from tidegate.engine.operators import runs as operator_runs
from tidegate.engine.operators.queues import Live, live
from tidegate.engine.operators.runs import heartbeat_lost_s, is_stuck, matching_runs, workers_of_running

_SUBMIT_ERRORS: dict[int | str, dict[str, Any]] = {
    **ERRORS,
    415: {"model": schemas.Error, "description": "The body is not declared as JSON."},
    **REJECTED,
}

router = APIRouter(prefix=PREFIX, tags=["runs"])


def _links(request: Request, run_id: str) -> schemas.RunLinks:
    """Absolute paths on this server, under the prefix the API is mounted at (if any)."""
    base = f"{request.scope.get('root_path', '').rstrip('/')}{PREFIX}/runs/{run_id}"
    return schemas.RunLinks(self=base, events=f"{base}/events", cancel=f"{base}/cancel")


@dataclass(frozen=True)
class _Now:
    """What a run's representation is judged against: the rules in force, the app's time, the registry."""

    blocks: Live
    at: datetime
    workers: dict[str, WorkerRecord]

    @classmethod
    def read(cls, app: App, runs: list[RunRecord], at: datetime) -> _Now:
        return cls(live(app.store), at, workers_of_running(app.store, runs))


def _run(request: Request, record: RunRecord, now: _Now) -> dict[str, Any]:
    """The run as stored, but a queued run's block reason is why it waits now, as `queue why` says
    (engine/operators/queues.py), a running run whose worker's heartbeat is lost says since when, and a run past
    its lease is flagged stuck with its worker's last heartbeat (engine/operators/runs.py)."""
    derived = ("links", "stuck", "last_heartbeat", "worker_heartbeat_lost_s")
    fields = {name: getattr(record, name) for name in schemas.Run.model_fields if name not in derived}
    stuck = is_stuck(record, now.at)
    worker = now.workers.get(record.worker_id or "") if stuck else None
    return {
        **fields,
        "block_reason": now.blocks.reason(record),
        "stuck": stuck,
        "last_heartbeat": None if worker is None else worker.heartbeat_at,
        "worker_heartbeat_lost_s": heartbeat_lost_s(record, now.workers),
        "links": _links(request, record.id),
    }


def _submitted(request: Request, answer: Stored) -> dict[str, Any]:
    """A stored run (queued), or the run that held the submit's key as it is now (`duplicate`)."""
    if isinstance(answer, Duplicate):
        fields = {**submitted_fields(answer.run), "status": answer.run.status, "duplicate": True}
        return {**fields, "links": _links(request, answer.run.id)}
    return {**submitted_fields(answer), "status": RunStatus.QUEUED, "links": _links(request, answer.id)}


_DUPLICATE: dict[int | str, dict[str, Any]] = {
    200: {
        "model": schemas.SubmittedRun,
        "description": "A run already holds the submit's `unique_key` or `idempotency_key` (or its task's "
        "`Unique` key): that run, with `duplicate: true`. Nothing was stored.",
    },
    409: {
        "model": schemas.Error,
        "description": 'The task\'s `Unique` rule says `on_conflict="raise"` and a run holds the key '
        "(`duplicate_run`, naming it). Nothing was stored.",
    },
}


@router.post(
    "/runs", status_code=status.HTTP_201_CREATED, response_model=schemas.SubmittedRun,
    responses={**_SUBMIT_ERRORS, **_DUPLICATE}, dependencies=[can_write, json_body], summary="Submit a run",
)  # fmt: skip
async def submit_run(body: schemas.SubmitRequest, request: Request, response: Response) -> dict[str, Any]:
    state = request.app.state
    answer = await submit_one(_app(request), body, state.refusals, server_metrics(request), state.group_commit)
    if isinstance(answer, Duplicate):
        response.status_code = status.HTTP_200_OK
    return _submitted(request, answer)


@router.post(
    "/runs/batch", status_code=status.HTTP_201_CREATED, response_model=schemas.SubmittedBatch,
    responses={**_SUBMIT_ERRORS, 409: _DUPLICATE[409]}, dependencies=[can_write, json_body],
    summary="Submit runs: all or none", description="An item that met a run holding its key is answered by that run "
    "(`duplicate: true`); the others are stored.",
)  # fmt: skip
def submit_batch(body: schemas.BatchRequest, request: Request) -> dict[str, Any]:
    runs = server_metrics(request).counting_submits(lambda: submit(_app(request), body.runs, prefix="runs."))
    return {"runs": [_submitted(request, run) for run in runs]}


@router.get(
    "/runs", response_model=schemas.RunPage, responses=ERRORS, dependencies=[can_read], summary="Page through runs"
)
def list_runs(
    request: Request,
    status: RunStatus | None = None,
    queue: Annotated[str | None, Query(max_length=200)] = None,
    task: Annotated[str | None, Query(max_length=200)] = None,
    tag: Annotated[list[str] | None, Query(description="KEY=VALUE; repeat to require several.")] = None,
    since: Annotated[
        str | None, Query(max_length=40, description="Only runs submitted in the last DURATION (30m, 1h, 2d).")
    ] = None,
    stuck: Annotated[
        bool, Query(description="Only running runs past their lease (status, if given, must be running).")
    ] = False,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 50,
    cursor: Annotated[str | None, Query(max_length=400, description="`next_cursor` of the previous page.")] = None,
) -> dict[str, Any]:
    with blame("queue"):
        queue = None if queue is None else names.check_name("queue", queue)
    with blame("task"):
        task = None if task is None else names.check_name("task", task)
    with blame("tag"):
        tags = names.check_tags(dict(_tag_filter(item) for item in tag or []))
    with blame("since"):
        age = None if since is None else parse_duration(since, name="since", minimum=1.0)
    if stuck and status not in (None, RunStatus.RUNNING):
        raise FieldError("status", InvalidArgument(f"a stuck run is running: status={status.value} has none"))
    with blame("cursor"):
        before = None if cursor is None else _decode_cursor(cursor)
    app = _app(request)
    at = wall_now(app.clock)
    cutoff = None if age is None else at - timedelta(seconds=age)
    matching = matching_runs(
        app.store, at, status=status, queue=queue, task=task, tags=tags, submitted_since=cutoff,
        only_stuck=stuck, before=before, page=limit + 1,
    )  # fmt: skip
    records = list(islice(matching, limit + 1))  # one more than the page: whether there is a next one
    more = len(records) > limit
    page = records[:limit]
    now = _Now.read(app, page, at)
    return {
        "runs": [_run(request, record, now) for record in page],
        "next_cursor": _encode_cursor(page[-1].id) if more else None,
    }


@router.get(
    "/runs/{run_id}", response_model=schemas.RunDetail, responses={**ERRORS, **RUN_ERRORS},
    dependencies=[can_read], summary="Show a run",
)  # fmt: skip
def show_run(run_id: RunId, request: Request) -> dict[str, Any]:
    app = _app(request)
    record = find_run(app, run_id)
    steps = [
        {**{name: getattr(step, name) for name in schemas.Step.model_fields if name != "key"}, "key": step.step_key}
        for step in operator_runs.run_steps(app.store, record.id)
    ]
    children = [
        {name: getattr(child, name) for name in schemas.Child.model_fields}
        for child in operator_runs.run_children(app.store, record.id)
    ]
    links = {"parent_id": record.parent_id, "root_id": record.root_id, "depth": record.depth}
    now = _Now.read(app, [record], wall_now(app.clock))
    return {**_run(request, record, now), "steps": steps, **links, "children": children}


@router.get(
    "/runs/{run_id}/events", response_model=schemas.EventList, responses={**ERRORS, **RUN_ERRORS},
    dependencies=[can_read], summary="A run's events, oldest first",
)  # fmt: skip
def run_events(run_id: RunId, request: Request) -> dict[str, Any]:
    app = _app(request)
    record = find_run(app, run_id)
    return {"events": operator_runs.run_events(app.store, record.id)}


@router.post(
    "/runs/{run_id}/cancel", response_model=schemas.CancelResult, responses={**ERRORS, **RUN_ERRORS},
    dependencies=[can_write], summary="Cancel a run",
)  # fmt: skip
def cancel_run(run_id: RunId, request: Request) -> dict[str, Any]:
    app = _app(request)
    with blame("run_id"):
        names.check_run_id(run_id)
    after = operator_runs.cancel_run(app.store, run_id)
    return {"id": run_id, "status": after, "cancel_requested": after is RunStatus.RUNNING}


def _tag_filter(item: str) -> tuple[str, str]:
    key, equals, value = item.partition("=")
    if not equals:
        raise InvalidArgument(f"tag filter {item!r} is not KEY=VALUE")
    return key, value


def _encode_cursor(run_id: str) -> str:
    """Opaque to clients: the page's last id, so the next page starts right after it."""
    return base64.urlsafe_b64encode(run_id.encode()).decode().rstrip("=")


def _decode_cursor(cursor: str) -> str:
    try:
        decoded = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise InvalidArgument("cursor is not one this API returned: pass next_cursor as given") from None
    if not names.is_one_line(decoded):
        raise InvalidArgument("cursor is not one this API returned: pass next_cursor as given")
    return decoded
