"""A ceiling on request bodies, in size and in time, enforced while they arrive.

A submit carries at most TIDEGATE_MAX_PAYLOAD of args (the domain's limit),
so a body larger than that plus room for the options is refused with 413
before it is read into memory, whether it declares its length or streams it.
A batch shares the same budget: larger sets go in several requests.

The headers have a deadline in the protocol (header_deadline.py); the body
gets its own here, from the app's first read of it to its last part
(TIDEGATE_BODY_TIMEOUT): a client that declares a body and trickles it, a
byte now and then, is answered 408 instead of holding a request, its task
and its connection for as long as it likes. Reads after the body is complete
(a stream waiting for its client to leave) have no deadline.
"""

from __future__ import annotations

import asyncio

from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

OPTIONS_ROOM = 64 * 1024  # task name, options and JSON punctuation around the args


class BodyTooLarge(HTTPException):
    def __init__(self, limit: int) -> None:
        super().__init__(413, f"request body is over the limit of {limit} bytes (TIDEGATE_MAX_PAYLOAD + options)")


class BodyTooSlow(HTTPException):
    def __init__(self, seconds: float) -> None:
        super().__init__(408, f"request body did not arrive within {seconds:g}s (TIDEGATE_BODY_TIMEOUT)")


class BodyLimit:
    """ASGI middleware: 413 as soon as a body passes `max_bytes`, 408 once it takes over `timeout` seconds."""

    def __init__(self, app: ASGIApp, max_bytes: int, timeout: float) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.timeout = timeout

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
        deadline: float | None = None  # set at the first read of the body
        complete = False
        loop = asyncio.get_running_loop()

        async def counted() -> Message:
            nonlocal received, deadline, complete
            if complete:
                return await receive()
            deadline = loop.time() + self.timeout if deadline is None else deadline
            try:
                message = await asyncio.wait_for(receive(), max(0.0, deadline - loop.time()))
            except TimeoutError:
                raise BodyTooSlow(self.timeout) from None
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise BodyTooLarge(self.max_bytes)
                complete = not message.get("more_body", False)
            return message

        await self.app(scope, counted, send)
