"""Who sees a page and who may press its buttons: the API's tokens, carried by a cookie, plus CSRF.

A browser cannot send a bearer header on a navigation, so `/login` takes a
token once and keeps it in an HttpOnly, SameSite=Strict cookie; every page then
asks the API's own `grant` (the same check, constant-time, loopback-only when
no token is configured). A page rendered for a read token has no mutating
control, and every POST needs a write grant and a form token derived from the
presented token with a per-process secret: a page on another site can neither
read nor guess it, so a forged form is refused (403) before anything changes. (A form,
sign-in or sign-out from another origin's page is refused before that, by the
API's one same-origin rule for every change: api/origins.py.)
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Annotated
from urllib.parse import parse_qsl, quote, urlsplit

from fastapi import Depends, Request
from starlette.exceptions import HTTPException
from starlette.responses import Response

COOKIE = "tidegate_token"
Grant = Callable[[Request, str | None], str]  # 'write' | 'read', or raises 401/403
Events = Callable[[Request, int | None, float | None], Awaitable[Response]]


@dataclass(frozen=True)
class Wiring:
    """What the API hands the dashboard, and the secret its form tokens are derived with."""

    grant: Grant
    events: Events
    secret: bytes = field(default_factory=lambda: secrets.token_bytes(32))

    def form_token(self, token: str | None) -> str:
        return hmac.new(self.secret, (token or "").encode("utf-8", "surrogateescape"), hashlib.sha256).hexdigest()


@dataclass(frozen=True)
class Viewer:
    can_write: bool
    form_token: str
    signed_in: bool  # holds a token cookie (a sign-out button makes sense)


class LoginRequired(Exception):
    """A page asked without a valid token: the browser is sent to /login, then back."""

    def __init__(self, back: str) -> None:
        super().__init__(back)
        self.back = back


def wiring(request: Request) -> Wiring:
    wired: Wiring = request.app.state.dashboard
    return wired


def presented(request: Request) -> str | None:
    """The token of this request: a bearer header (scripts, tests) or the dashboard's cookie."""
    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    return request.cookies.get(COOKIE) or None


def _viewer(request: Request) -> Viewer:
    wired = wiring(request)
    token = presented(request)
    try:
        access = wired.grant(request, token)
    except HTTPException as error:
        if error.status_code == 401:
            query = f"?{request.url.query}" if request.url.query else ""
            raise LoginRequired(safe_back(request.url.path + query)) from None
        raise
    return Viewer(access == "write", wired.form_token(token), request.cookies.get(COOKIE) is not None)


def safe_back(path: str) -> str:
    """Where to return after login: a path on this site only (never `//other.example`)."""
    parts = urlsplit(path)
    if parts.scheme or parts.netloc or not path.startswith("/") or path.startswith("//") or "\\" in path:
        return "/"
    return path


def login_url(root: str, back: str) -> str:
    return f"{root}/login?next={quote(safe_back(back), safe='/')}"


async def form_of(request: Request) -> dict[str, str]:
    """An urlencoded form body (the BodyLimit middleware already bounds its size)."""
    body = (await request.body()).decode("utf-8", "replace")
    return dict(parse_qsl(body, keep_blank_values=True, max_num_fields=50))


async def _editor(request: Request, viewer: Annotated[Viewer, Depends(_viewer)]) -> dict[str, str]:
    """The form of a mutating POST, once the grant allows writes and the form token matches."""
    if not viewer.can_write:
        raise HTTPException(403, "this token may only read: changes need TIDEGATE_API_TOKEN")
    form = await form_of(request)
    if not hmac.compare_digest(form.get("form_token", "").encode(), viewer.form_token.encode()):
        raise HTTPException(403, "the form token is missing or stale: reload the page and try again")
    return form


ViewerDep = Annotated[Viewer, Depends(_viewer)]  # who asks: a page's first parameter
FormDep = Annotated[dict[str, str], Depends(_editor)]  # a mutating form, checked
