"""Every failure answered as `{"error": code, "detail": text}` with its status, never a traceback.

Expected failures are tidegate's own errors (mapped to a status here, once),
request validation (422 naming the field) and HTTP errors (unknown route,
body too large). Anything else is a bug: it is logged with its traceback and
answered 500 without one, so a client never reads our internals.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from tidegate.bootstrap import masked
from tidegate.domain.errors import (
    AdmissionRejected,
    ConfigurationError,
    InvalidArgument,
    PoolNotFound,
    QueueNotFound,
    RateNotFound,
    RunNotFound,
    RunNotRetryable,
    ScheduleNotFound,
    SchemaError,
    StoreUnavailable,
    TidegateError,
    UnknownTask,
)
from tidegate.domain.unique import DuplicateRun
from tidegate.engine.operators.pool_config import InvalidField

log = logging.getLogger("tidegate.api")

# (error type, status, code): the first that matches wins, so subclasses come first.
_TIDEGATE_STATUS: Sequence[tuple[type[TidegateError], int, str]] = (
    (RunNotFound, 404, "run_not_found"),
    (RunNotRetryable, 409, "run_not_retryable"),
    (DuplicateRun, 409, "duplicate_run"),
    (QueueNotFound, 404, "queue_not_found"),
    (PoolNotFound, 404, "pool_not_found"),
    (RateNotFound, 404, "rate_not_found"),
    (ScheduleNotFound, 404, "schedule_not_found"),
    (UnknownTask, 422, "unknown_task"),
    (InvalidArgument, 422, "invalid_argument"),
    (ConfigurationError, 422, "invalid_argument"),
    (StoreUnavailable, 503, "store_unavailable"),
    (SchemaError, 503, "schema_mismatch"),
    (TidegateError, 400, "bad_request"),
)
_HTTP_CODES = {
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    408: "request_timeout",
    413: "payload_too_large",
    415: "unsupported_media_type",
    429: "too_many_failures",
}


def _classify(error: TidegateError) -> tuple[int, str]:
    return next((status, code) for kind, status, code in _TIDEGATE_STATUS if isinstance(error, kind))


class FieldError(TidegateError):
    """A domain error about one field of the request; it keeps the domain error's status and code."""

    def __init__(self, field: str, error: TidegateError) -> None:
        self.field = field
        self.status, self.code = _classify(error)
        super().__init__(str(error))


@contextmanager
def blame(field: str) -> Iterator[None]:
    """Name `field` in any input error raised inside: the client learns which value to fix."""
    try:
        yield
    except (InvalidArgument, ConfigurationError, UnknownTask) as error:
        raise FieldError(field, error) from None


def text(message: str) -> str:
    """One line, no password, encodable: a message may quote back what the client sent."""
    line = next((part.strip() for part in message.splitlines() if part.strip()), "") or "unknown error"
    return masked(line).encode("utf-8", "backslashreplace").decode("utf-8")


def error_response(
    status: int,
    code: str,
    detail: str,
    *,
    field: str | None = None,
    headers: Mapping[str, str] | None = None,
    **extra: Any,
) -> JSONResponse:
    body: dict[str, Any] = {"error": code, "detail": text(detail), "field": field, **extra}
    return JSONResponse(body, status_code=status, headers=headers)


def _field_name(location: Sequence[Any]) -> str:
    """`("body", "runs", 3, "priority")` -> `runs.3.priority`; the body itself is `body`."""
    parts = [str(part) for part in location[1:]] if location and location[0] in ("body", "query", "path") else []
    return ".".join(parts) or (str(location[0]) if location else "body")


async def _on_validation(request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, RequestValidationError)
    first = error.errors()[0] if error.errors() else {"loc": ("body",), "msg": "invalid request"}
    field = _field_name(first.get("loc", ()))
    if first.get("type") == "json_invalid":
        field = "body"
    return error_response(422, "invalid_request", f"{field}: {first.get('msg', 'invalid')}", field=field)


async def _on_tidegate(request: Request, error: Exception) -> JSONResponse:
    if isinstance(error, AdmissionRejected):
        retry_after = max(1, int(error.retry_after))  # whole seconds; never 0, which reads as "now"
        return error_response(
            429, "admission_rejected", str(error), headers={"Retry-After": str(retry_after)}, retry_after=retry_after
        )
    if isinstance(error, FieldError):
        return error_response(error.status, error.code, str(error), field=error.field)
    assert isinstance(error, TidegateError)
    status, code = _classify(error)
    return error_response(status, code, str(error), field=error.field if isinstance(error, InvalidField) else None)


async def _on_http(request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, HTTPException)
    code = _HTTP_CODES.get(error.status_code, "http_error")
    return error_response(error.status_code, code, str(error.detail), headers=error.headers)


async def _on_bug(request: Request, error: Exception) -> JSONResponse:
    log.error("unexpected error answering %s %s", request.method, request.url.path, exc_info=error)
    return error_response(500, "internal_error", "unexpected error; the server log has the details")


def install(api: FastAPI) -> None:
    api.add_exception_handler(RequestValidationError, _on_validation)
    api.add_exception_handler(TidegateError, _on_tidegate)
    api.add_exception_handler(HTTPException, _on_http)
    api.add_exception_handler(Exception, _on_bug)
