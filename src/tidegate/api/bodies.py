"""A ceiling on request bodies, enforced while they arrive.

A submit carries at most TIDEGATE_MAX_PAYLOAD of args (the domain's limit),
so a body larger than that plus room for the options is refused with 413
before it is read into memory, whether it declares its length or streams it.
A batch shares the same budget: larger sets go in several requests.
"""

from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

OPTIONS_ROOM = 64 * 1024  # task name, options and JSON punctuation around the args


class BodyTooLarge(HTTPException):
    def __init__(self, limit: int) -> None:
        super().__init__(413, f"request body is over the limit of {limit} bytes (TIDEGATE_MAX_PAYLOAD + options)")


class BodyLimit:
    """ASGI middleware: 413 as soon as a body passes `max_bytes`."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_bytes):
            error = BodyTooLarge(self.max_bytes)
            body = {"error": "payload_too_large", "detail": error.detail, "field": "body"}
            await JSONResponse(body, status_code=413)(scope, receive, send)
            return
        received = 0

        async def counted() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise BodyTooLarge(self.max_bytes)
            return message

        await self.app(scope, counted, send)
