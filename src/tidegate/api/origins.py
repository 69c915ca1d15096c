"""Changes only from this server's own pages: the one same-origin rule of the API and the dashboard.

A page on another origin can make a browser send this server a form or a
body-less POST (both are CORS-simple: no preflight asks first), and the browser
delivers it whatever it then lets the page read back. Without a token (loopback)
or with the dashboard's cookie, such a request would act, so every POST, PUT,
PATCH and DELETE whose `Origin` (or, lacking it, `Referer`) is not exactly this
server's scheme://host:port is refused 403 before any route runs. Another port
on the same machine (a dev server on localhost:3000) is another origin. A
request that names no page (curl, an SDK, a worker) passes: only a browser
adds these headers, and a page cannot take them off (it can only make Origin
`null`, which is refused).

Behind a proxy that ends TLS the server must know its scheme: uvicorn takes it
from `X-Forwarded-Proto` when the proxy's address is in `FORWARDED_ALLOW_IPS`.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from tidegate.api.errors import error_response

UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_DEFAULT_PORTS = {"http": 80, "https": 443}


def _origin(scheme: str, netloc: str) -> str | None:
    """`scheme://host:port`, lower-cased, the port always written (a default one included): None if unreadable."""
    try:
        parts = urlsplit(f"{scheme}://{netloc}")
        port = parts.port or _DEFAULT_PORTS.get(scheme.lower())
    except ValueError:
        return None
    if not parts.hostname or port is None:
        return None
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return f"{scheme.lower()}://{host.lower()}:{port}"


def foreign_page(scheme: str, headers: Headers) -> str | None:
    """The origin of the page a browser says this request came from, when it is not this server's own.

    `Origin` names it; a browser that sends none (an older one, on some navigations) may name the
    page in `Referer`. A request naming neither is no page's, and passes (None).
    """
    named = headers.get("origin") or headers.get("referer")
    if named is None:
        return None
    try:
        page = urlsplit(named)
    except ValueError:
        return "an unreadable origin"
    theirs = _origin(page.scheme, page.netloc) if page.scheme and page.netloc else None
    if theirs is not None and theirs == _origin(scheme, headers.get("host", "")):
        return None
    return f"{page.scheme}://{page.netloc}" if theirs is not None else named[:100]


class SameOrigin:
    """ASGI middleware: 403 for an unsafe method sent by another origin's page, before any route runs."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] in UNSAFE_METHODS:
            page = foreign_page(scope["scheme"], Headers(scope=scope))
            if page is not None:
                detail = f"a {scope['method']} sent by a page of {page}, not of this server, is refused"
                await error_response(403, "forbidden", detail)(scope, receive, send)
                return
        await self.app(scope, receive, send)
