"""The documented error answers of routes whose success is not JSON (`/metrics`, the event stream).

FastAPI documents an error `model` under the route's own media type, which
for these routes would claim a 401 comes as `text/plain` or
`text/event-stream`. Errors are always the JSON `Error` shape, so these
routes name its schema under `application/json` themselves.
"""

from __future__ import annotations

from typing import Any

ERROR_SCHEMA = {"$ref": "#/components/schemas/Error"}


def json_error(description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": ERROR_SCHEMA}}}


READ_ERRORS: dict[int | str, dict[str, Any]] = {
    401: json_error("A valid bearer token is required."),
    403: json_error("With no token: a request not addressed to loopback, or from another site's page."),
    503: json_error("The store cannot be reached."),
}
