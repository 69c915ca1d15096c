"""ASGI middleware: one access line per HTTP request on the `tidegate.access` logger, for `tidegate serve`.

uvicorn's own access line is written when the response starts and knows no
duration; this one is written when the response has ended (or the app has
raised), with the fields a log search wants as fields, not as text to parse:
`method`, `path`, `status`, `duration_ms` and `client`. It sits inside the
ASGI instrumentation's span (api/application.py adds it first), so with an
SDK configured the line carries that request's trace and span ids
(cli/logs.py). The path is logged without its query string: a query may hold
what its caller would not want in a log. An event stream's line is written
when the stream closes, with its whole length as the duration.
"""

from __future__ import annotations

import logging

from starlette.types import Scope

from tidegate.api.timing import Timed

logger = logging.getLogger("tidegate.access")


class AccessLog(Timed):
    """Logs each HTTP request, at INFO, once its answer is complete."""

    def answered(self, scope: Scope, status: int, seconds: float) -> None:
        _log(scope, status, seconds * 1000)


def _log(scope: Scope, status: int, duration_ms: float) -> None:
    client = scope.get("client")
    where = f"{client[0]}:{client[1]}" if client else "-"
    method, path = scope["method"], scope["path"]
    logger.info(
        '%s "%s %s HTTP/%s" %d %.1fms',
        where, method, path, scope.get("http_version", "1.1"), status, duration_ms,
        extra={
            "method": method, "path": path, "status": status,
            "duration_ms": round(duration_ms, 1), "client": where,
        },
    )  # fmt: skip
