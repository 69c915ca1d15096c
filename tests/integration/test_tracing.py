"""Traces with the OpenTelemetry SDK's in-memory exporter: an HTTP submit, the attempt it leads to, a child
run and a workflow step read as one tree, with the messaging attributes; the JSON log lines of a traced
attempt carry its trace and span ids."""

from __future__ import annotations

import io
import json
import logging
import threading
from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from opentelemetry.util._once import Once

import tidegate
from tests.apps.api import local_client
from tests.conftest import wait_status, wait_until
from tidegate import App, Concurrency, RunStatus
from tidegate.api import create_api
from tidegate.cli.logs import JsonLines, TraceIds


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """An SDK provider with an in-memory exporter for this test only (the API's global is put back after)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    saved = (trace._TRACER_PROVIDER, trace._TRACER_PROVIDER_SET_ONCE)
    trace._TRACER_PROVIDER_SET_ONCE = Once()
    trace.set_tracer_provider(provider)
    try:
        yield exporter
    finally:
        trace._TRACER_PROVIDER, trace._TRACER_PROVIDER_SET_ONCE = saved
        provider.shutdown()


def _declare(app: App) -> None:
    app.set_pool_limit("warehouse", 1)

    @app.step(pool="warehouse", name="load")
    def load(x: int) -> int:
        return x * 2

    @app.workflow(queue="flows", name="flow")
    def flow(wf: tidegate.Workflow, x: int) -> object:
        return wf.step(load, x)

    @app.task(queue="kids", name="child")
    def child(n: int) -> int:
        return n + 1

    @app.task(queue="parents", name="parent")
    def parent(ctx: tidegate.Context, n: int) -> int:
        doubled: int = ctx.trigger_and_wait(flow, x=ctx.trigger_and_wait(child, n=n))
        return doubled

    app.store.check_schema()


def _one(found: list[ReadableSpan], name: str) -> ReadableSpan:
    named = [span for span in found if span.name == name]
    assert len(named) == 1, [span.name for span in found]
    return named[0]


def _parent_of(span: ReadableSpan) -> int | None:
    return None if span.parent is None else span.parent.span_id


def test_an_http_submit_a_child_and_a_step_are_one_trace(app: App, start_worker, spans: InMemorySpanExporter) -> None:
    _declare(app)
    client = local_client(app.asgi())
    response = client.post("/api/v1/runs", json={"task": "parent", "args": {"n": 1}})
    assert response.status_code == 201, response.text
    run_id = response.json()["id"]
    start_worker(max_workers=4)
    wait_status(app, run_id, RunStatus.COMPLETED)
    assert app.run(run_id).info().result == 4
    wait_until(lambda: sum(span.name.startswith("process") for span in spans.get_finished_spans()) >= 5)
    found = list(spans.get_finished_spans())

    http = [span for span in found if span.kind is SpanKind.SERVER]
    send = _one(found, "send parents")
    assert len(http) == 1 and _parent_of(send) == http[0].context.span_id  # the ASGI instrumentation's span
    assert send.kind is SpanKind.PRODUCER
    assert send.attributes is not None and send.attributes["messaging.system"] == "tidegate"
    assert send.attributes["messaging.destination.name"] == "parents"
    assert send.attributes["messaging.message.id"] == run_id

    # The parent ran twice: it waited for the child, then for the workflow; each attempt is a consumer
    # span under the submit's and linked to it.
    attempts = sorted((s for s in found if s.name == "process parents"), key=lambda s: s.start_time or 0)
    assert [s.attributes and s.attributes["tidegate.run.attempt"] for s in attempts] == [1, 2, 3]
    for attempt in attempts:
        assert attempt.kind is SpanKind.CONSUMER and _parent_of(attempt) == send.context.span_id
        assert [link.context.span_id for link in attempt.links] == [send.context.span_id]
        assert attempt.attributes is not None
        assert attempt.attributes["tidegate.run.id"] == run_id
        assert attempt.attributes["tidegate.task"] == "parent"
        assert attempt.attributes["messaging.destination.name"] == "parents"
        assert attempt.attributes["tidegate.run.waited_on"] == ()
    assert {s.trace_id for s in (s.context for s in found)} == {send.context.trace_id}

    trigger_child = _one(found, "trigger_and_wait kids")
    assert _parent_of(trigger_child) == attempts[0].context.span_id
    assert [event.name for event in trigger_child.events] == ["waiting"]
    child_attempt = _one(found, "process kids")
    assert _parent_of(child_attempt) == trigger_child.context.span_id
    assert child_attempt.attributes is not None and child_attempt.attributes["tidegate.task"] == "child"

    trigger_flow = _one(found, "trigger_and_wait flows")
    assert _parent_of(trigger_flow) == attempts[1].context.span_id
    flow_attempt = _one(found, "process flows")
    assert _parent_of(flow_attempt) == trigger_flow.context.span_id
    step = _one(found, "step load")
    assert _parent_of(step) == flow_attempt.context.span_id
    assert step.attributes is not None and step.attributes["tidegate.step.needs"] == ("pool:warehouse=1",)
    assert [event.name for event in step.events] == ["pool_wait", "pool_acquired"]


def test_an_attempt_names_the_scopes_it_waited_on(app: App, start_worker, spans: InMemorySpanExporter) -> None:
    app.queue("limited", concurrency=Concurrency(global_limit=1))
    release = threading.Event()

    @app.task(queue="limited", name="hold")
    def hold(n: int) -> int:
        release.wait(30)
        return n

    first, second = hold.submit(n=1), hold.submit(n=2)
    start_worker(max_workers=2)
    wait_until(lambda: app.run(second.id).status() is RunStatus.QUEUED and bool(app.run(second.id).info().block_reason))
    release.set()
    wait_status(app, second.id, RunStatus.COMPLETED)
    wait_until(lambda: sum(span.name == "process limited" for span in spans.get_finished_spans()) == 2)
    by_run = {
        span.attributes["tidegate.run.id"]: span
        for span in spans.get_finished_spans()
        if span.name == "process limited" and span.attributes is not None
    }
    assert by_run[first.id].attributes is not None and by_run[first.id].attributes["tidegate.run.waited_on"] == ()
    assert by_run[second.id].attributes is not None
    assert by_run[second.id].attributes["tidegate.run.waited_on"] == ("queue:limited",)


def test_json_log_lines_carry_the_fields_and_the_active_span(
    app: App, start_worker, spans: InMemorySpanExporter
) -> None:
    @app.task(queue="logged", name="add")
    def add(a: int, b: int) -> int:
        return a + b

    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonLines())
    handler.addFilter(TraceIds())
    logger = logging.getLogger("tidegate.worker")
    previous = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        run = add.submit(a=1, b=2)
        worker = start_worker(max_workers=1)
        wait_status(app, run.id, RunStatus.COMPLETED)
        wait_until(lambda: '"run.completed"' in stream.getvalue())
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous)
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    mine = {line["event"]: line for line in lines if line.get("run_id") == run.id}
    assert set(mine) == {"run.claimed", "run.started", "run.completed"}
    completed = mine["run.completed"]
    assert completed["level"] == "info" and completed["logger"] == "tidegate.worker"
    assert (completed["task"], completed["queue"], completed["attempt"]) == ("add", "logged", 1)
    assert completed["worker"] == worker.id and completed["duration_ms"] >= 0 and completed["ts"].endswith("+00:00")
    (attempt,) = [span for span in spans.get_finished_spans() if span.name == "process logged"]
    assert completed["trace_id"] == format(attempt.context.trace_id, "032x")
    assert completed["span_id"] == format(attempt.context.span_id, "016x")
    assert mine["run.started"]["span_id"] == mine["run.claimed"]["span_id"] == completed["span_id"]


def test_a_requests_access_line_carries_its_span(app: App, spans: InMemorySpanExporter) -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonLines())
    handler.addFilter(TraceIds())
    logger = logging.getLogger("tidegate.access")
    previous = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        client = local_client(create_api(app, access_log=True))
        assert client.get("/api/v1/nowhere").status_code == 404
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous)
    (line,) = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert (line["method"], line["path"], line["status"], line["logger"]) == (
        "GET",
        "/api/v1/nowhere",
        404,
        "tidegate.access",
    )
    (request,) = [span for span in spans.get_finished_spans() if span.kind == SpanKind.SERVER]
    assert line["trace_id"] == format(request.context.trace_id, "032x")
    assert line["span_id"] == format(request.context.span_id, "016x")
