"""`/runs` (filtered, paged) and `/runs/{id}` with its tabs: Overview, Steps, Children, Concurrency, Why, Events.

The list, the run with its steps, children and events, and the cancel and retry are
`engine.operators.runs` (as `GET /api/v1/runs` and `GET /api/v1/runs/{id}`; a running
run whose worker's heartbeat is lost says since when), the Why tab and a
waiting run's header are `engine.operators.why.explain` (as `GET /api/v1/runs/{id}/why`
and `tidegate queue why`). A retry or cancel the store refuses (a ceiling, a
status that cannot be retried) is shown on the run's page, not as an error page.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from tidegate.dashboard import data
from tidegate.dashboard.access import FormDep, ViewerDep
from tidegate.dashboard.graph import run_graph
from tidegate.dashboard.render import app_of, page, redirect, root_of
from tidegate.domain import names
from tidegate.domain.errors import AdmissionRejected, InvalidArgument, RunNotFound, TidegateError
from tidegate.domain.model import EventRecord, RunStatus
from tidegate.engine.operators import runs as operator_runs
from tidegate.engine.operators.runs import heartbeat_lost_s, workers_of_running
from tidegate.engine.operators.why import explain

router = APIRouter()
PAGE = 50
TABS = ("overview", "steps", "children", "concurrency", "why", "events")
RUN_EVENTS = {"RunQueued", "RunDequeued", "RunBlocked", "RunStarted", "RunRequeued", "RunCanceled"}
SLOT_EVENTS = {"StepSlotWaiting", "StepSlotClaimed", "StepSlotRenewed", "StepSlotReleased", "PoolUnconfigured"}
STEP_EVENTS = SLOT_EVENTS | {"StepOutputWritten"}  # and where a Kubernetes step ran (its Job and pod)


def _filters(status: str | None, queue: str | None, task: str | None, tag: str | None) -> dict[str, Any]:
    """The list's filters, checked as the API checks them (a bad one is a 422 naming it)."""
    tags: dict[str, str] = {}
    if tag:
        key, equals, value = tag.partition("=")
        if not equals:
            raise InvalidArgument(f"tag filter {tag!r} is not KEY=VALUE")
        tags = names.check_tags({key: value})
    try:
        chosen = RunStatus(status) if status else None
    except ValueError:
        raise InvalidArgument(f"status {status!r} is not one of {', '.join(s.value for s in RunStatus)}") from None
    return {
        "status": chosen,
        "queue": names.check_name("queue", queue) if queue else None,
        "task": names.check_name("task", task) if task else None,
        "tags": tags,
    }


@router.get("/runs")
def runs_page(
    request: Request,
    viewer: ViewerDep,
    status: str | None = None,
    queue: str | None = None,
    task: str | None = None,
    tag: str | None = None,
    before: str | None = None,
) -> Response:
    shown = {"status": status or "", "queue": queue or "", "task": task or "", "tag": tag or ""}
    store = data.declared(app_of(request))
    queues = data.queue_summaries(store)
    try:
        filters = _filters(status, queue, task, tag)
        if before:
            names.check_run_id(before)
    except TidegateError as error:
        return page(request, "runs.html", viewer, 422, runs=[], more=None, shown=shown, queues=queues,
                    statuses=list(RunStatus), error=str(error), first=True, newest="")  # fmt: skip
    records = operator_runs.page_runs(store, **filters, before=before or None, limit=PAGE + 1)
    listed = records[:PAGE]
    more = (
        urlencode({**{k: v for k, v in shown.items() if v}, "before": listed[-1].id}) if len(records) > PAGE else None
    )
    newest = urlencode({k: v for k, v in shown.items() if v})
    workers = workers_of_running(store, listed)
    lost = {run.id: heartbeat_lost_s(run, workers) for run in listed}
    return page(request, "runs.html", viewer, runs=listed, more=more, shown=shown, queues=queues, lost=lost,
                statuses=list(RunStatus), error=None, first=not before, newest=newest)  # fmt: skip


def _concurrency(events: list[EventRecord]) -> tuple[list[EventRecord], dict[str, list[tuple[EventRecord, int]]]]:
    """The run's queue events, and each step's slot events grouped by step key (oldest first), a
    repeated wait (the same StepSlotWaiting at each retry) shown once with its count."""
    steps: dict[str, list[tuple[EventRecord, int]]] = defaultdict(list)
    for event in events:
        if event.type not in STEP_EVENTS:
            continue
        group = steps[event.step_key or "(run)"]
        if group and group[-1][0].type == event.type == "StepSlotWaiting" and group[-1][0].metadata == event.metadata:
            group[-1] = (group[-1][0], group[-1][1] + 1)
        else:
            group.append((event, 1))
    return [event for event in events if event.type in RUN_EVENTS and event.step_key is None], dict(steps)


@router.get("/runs/{run_id}")
def run_page(run_id: str, request: Request, viewer: ViewerDep, tab: str = "overview") -> Response:
    return _run_page(request, viewer, run_id, tab)


def _run_page(
    request: Request, viewer: Any, run_id: str, tab: str, status: int = 200, error: str | None = None
) -> Response:
    app = app_of(request)
    store = app.store
    found = operator_runs.detail(store, run_id) if names.is_one_line(run_id) else None
    if found is None:
        return page(request, "missing.html", viewer, 404, what=f"run {run_id}")
    record, steps, children, events = found.run, found.steps, found.children, found.events
    tab = tab if tab in TABS else "overview"
    graph = run_graph(app, record, steps, children, root_of(request)) if tab == "steps" else None
    run_events, step_events = _concurrency(events)
    waits = record.status is RunStatus.WAITING
    explanation = explain(store, record.id) if tab == "why" or waits else None
    reason = data.run_reason(store, record)
    lost = heartbeat_lost_s(record, workers_of_running(store, [record]))
    return page(
        request, "run.html", viewer, status, run=record, tab=tab, tabs=TABS, steps=steps, graph=graph, lost=lost,
        children=children, events=events, run_events=run_events, step_events=step_events,
        pods=data.step_pods(events), why=explanation, reason=reason, as_json=data.as_json,
        error=error, canonical=f"/runs/{record.id}" + (f"?tab={tab}" if tab != "overview" else ""),
    )  # fmt: skip


def _refused(error: TidegateError) -> int:
    """The status of a page showing a refused action: 429 past a ceiling (try later), else 409."""
    return 429 if isinstance(error, AdmissionRejected) else 404 if isinstance(error, RunNotFound) else 409


async def _act(request: Request, viewer: Any, run_id: str, verb: str) -> Response:
    """Cancel or retry through the store; a refusal is shown on the run's page, in words."""
    store = app_of(request).store

    def work() -> None:
        names.check_run_id(run_id)
        if verb == "cancel":
            operator_runs.cancel_run(store, run_id)
        else:
            operator_runs.retry_run(store, run_id)

    try:
        await run_in_threadpool(work)
    except TidegateError as error:
        message = f"The {verb} was refused: {error}"
        return await run_in_threadpool(_run_page, request, viewer, run_id, "overview", _refused(error), message)
    return redirect(request, f"/runs/{run_id}")


@router.post("/runs/{run_id}/cancel")
async def cancel_run(run_id: str, request: Request, viewer: ViewerDep, form: FormDep) -> Response:
    return await _act(request, viewer, run_id, "cancel")


@router.post("/runs/{run_id}/retry")
async def retry_run(run_id: str, request: Request, viewer: ViewerDep, form: FormDep) -> Response:
    return await _act(request, viewer, run_id, "retry")
