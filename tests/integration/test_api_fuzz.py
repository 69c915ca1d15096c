"""Schemathesis fuzzes every operation of the OpenAPI document against a live server.

On SQLite and PostgreSQL, over real sockets: no answer is a 5xx, every
answer matches the schema the document declares for it (status, headers,
content type, body), and afterwards the runs in the store are exactly those
a 201 answered (nothing stored by a refused request, nothing lost).

A generated task name is almost never a registered one, so for half the
cases the submit's task (each batch item's) is set to a task that takes any
arguments: the other generated fields are then what decides between 201 and
422, and submits do reach the store.
"""

from __future__ import annotations

from typing import Any

import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.apps.api import live_server
from tests.conftest import execute_sql
from tidegate import App

EXAMPLES_PER_OPERATION = 60
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]
KNOWN_TASK = "anything"
STREAM = "/api/v1/events/stream"
STREAM_SECONDS = 0.2  # a stream answers until closed, and a case reads its answer whole


def _any_arguments(**kwargs: Any) -> None:
    return None


def _name_a_known_task(body: Any) -> None:
    """Point the submit (or each batch item) at the registered task, leaving every other field as generated."""
    items = body.get("runs") if isinstance(body, dict) and "runs" in body else [body]
    for item in items if isinstance(items, list) else []:
        if isinstance(item, dict):
            item["task"] = KNOWN_TASK


def _bound_the_stream(case: Any) -> None:
    """Keep a generated `close_after` that ends the stream soon; otherwise ask for a short one."""
    query = dict(case.query or {})
    value = query.get("close_after")
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value > STREAM_SECONDS:
        query["close_after"] = STREAM_SECONDS
    case.query = query


def test_every_operation_holds_its_schema_and_stores_only_what_it_answered_201(app: App, database_url: str) -> None:
    app.task(name=KNOWN_TASK)(_any_arguments)
    app.store.check_schema()  # the store is open (and migrated) before the first request: its rows can be counted
    created: set[str] = set()
    with live_server(app.asgi()) as base_url:
        schema = schemathesis.openapi.from_url(f"{base_url}/api/v1/openapi.json")
        operations = [result.ok() for result in schema.get_all_operations()]
        assert {f"{op.method.upper()} {op.path}" for op in operations} >= {
            "POST /api/v1/runs", "POST /api/v1/runs/batch", "GET /api/v1/runs", "GET /api/v1/runs/{run_id}",
            "GET /api/v1/runs/{run_id}/events", "POST /api/v1/runs/{run_id}/cancel", "GET /healthz", "GET /readyz",
            "GET /api/v1/runs/{run_id}/why", "POST /api/v1/runs/{run_id}/retry", "GET /api/v1/queue",
            "GET /api/v1/workers",
        }  # fmt: skip
        assert {f"{op.method.upper()} {op.path}" for op in operations} >= {
            "GET /api/v1/queues", "POST /api/v1/queues/{name}/pause", "POST /api/v1/queues/{name}/resume",
            "GET /api/v1/pools", "GET /api/v1/pools/{name}", "PUT /api/v1/pools/{name}",
            "GET /api/v1/limits", "PUT /api/v1/limits", "DELETE /api/v1/limits",
        }  # fmt: skip
        assert {f"{op.method.upper()} {op.path}" for op in operations} >= {
            "GET /api/v1/tasks", "GET /api/v1/schedules", "POST /api/v1/schedules/{name}/pause",
            "POST /api/v1/schedules/{name}/resume", "DELETE /api/v1/schedules/{name}", "POST /api/v1/sweep",
        }  # fmt: skip
        for operation in operations:

            @given(case=operation.as_strategy(), known_task=st.booleans())
            @settings(
                max_examples=EXAMPLES_PER_OPERATION,
                deadline=None,
                derandomize=True,
                database=None,
                suppress_health_check=list(HealthCheck),
            )
            def exercise(case: Any, known_task: bool) -> None:
                if known_task and case.method == "POST" and case.body is not None:
                    _name_a_known_task(case.body)
                if case.path == STREAM:
                    _bound_the_stream(case)
                response = case.call(base_url=base_url)
                case.validate_response(response, checks=CHECKS)
                if response.status_code == 201:
                    body = response.json()
                    created.update(run["id"] for run in body.get("runs", [body]))

            exercise()

    stored = {row[0] for row in execute_sql(database_url, "SELECT id FROM tidegate_runs")}
    assert created, "no submit succeeded: the fuzz never reached the store"
    assert stored == created
