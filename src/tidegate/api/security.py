"""Who may call the API: bearer tokens from the environment, checked in constant time.

Secure by default: with no token the server answers only on loopback (the
`serve` command refuses a wider bind), so a fresh install is never an open
door. `TIDEGATE_API_TOKEN` grants everything; `TIDEGATE_API_READ_TOKEN` only
reads (every mutating route answers 403). With either set, every route but
`/healthz` needs one (401 without). There are no cookies, so there is no
cross-site request to forge with a token; without one, a browser on this
machine is the remaining way in, so a tokenless API answers only requests
addressed to a loopback host (a DNS name rebound to 127.0.0.1 is not) and
refuses those a browser marks as coming from another site (`Origin`).

A token must be one a client can send (printable ASCII, no spaces: a header's
value and the sign-in form lose the spaces around it), and one that listens
beyond loopback must be long enough not to be guessed (`MIN_WIDE_TOKEN`
characters); failed attempts are throttled per client address (throttle.py).
"""

from __future__ import annotations

import hmac
import ipaddress
import os
from dataclasses import dataclass
from typing import Annotated
from urllib.parse import urlsplit

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.exceptions import HTTPException

from tidegate.api.throttle import FailureThrottle
from tidegate.domain.errors import ConfigurationError

TOKEN_ENV = "TIDEGATE_API_TOKEN"
READ_TOKEN_ENV = "TIDEGATE_API_READ_TOKEN"

MIN_WIDE_TOKEN = 24  # characters; token_urlsafe(32) gives 43
MAKE_ONE = "python -c 'import secrets; print(secrets.token_urlsafe(32))'"

_bearer = HTTPBearer(auto_error=False, description=f"A token from {TOKEN_ENV} or {READ_TOKEN_ENV}.")


@dataclass(frozen=True)
class Tokens:
    full: str | None = None
    read: str | None = None

    def __post_init__(self) -> None:
        for name, token in self.named():
            if not token or not all("!" <= char <= "~" for char in token):
                raise ConfigurationError(
                    f"{name} is empty or has a character no client can send: use printable ASCII without spaces "
                    f"(make one with {MAKE_ONE})"
                )

    def named(self) -> list[tuple[str, str]]:
        """(environment variable, token) of each token set."""
        pairs = ((TOKEN_ENV, self.full), (READ_TOKEN_ENV, self.read))
        return [(name, token) for name, token in pairs if token is not None]

    @classmethod
    def from_environment(cls) -> Tokens:
        return cls(os.environ.get(TOKEN_ENV) or None, os.environ.get(READ_TOKEN_ENV) or None)

    @property
    def required(self) -> bool:
        return self.full is not None or self.read is not None

    def access(self, presented: str) -> str | None:
        """'write', 'read' or None. Both are compared, so timing says nothing about which matched."""
        given = presented.encode("utf-8", "surrogateescape")
        full = self.full is not None and hmac.compare_digest(given, self.full.encode())
        read = self.read is not None and hmac.compare_digest(given, self.read.encode())
        return "write" if full else "read" if read else None


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_bind(host: str, tokens: Tokens) -> None:
    """Refuse to listen beyond this machine without a token: the one-line error names the fix."""
    if is_loopback(host):
        return
    if not tokens.required:
        raise ConfigurationError(
            f"refusing to listen on {host} without a token: set {TOKEN_ENV} (and optionally "
            f"{READ_TOKEN_ENV}), or bind to 127.0.0.1"
        )
    for name, token in tokens.named():
        if len(token) < MIN_WIDE_TOKEN:
            raise ConfigurationError(
                f"refusing to listen on {host} with a {len(token)}-character {name}: a token that listens "
                f"beyond loopback needs at least {MIN_WIDE_TOKEN} (make one with {MAKE_ONE})"
            )


def _host_of(value: str) -> str:
    try:
        return urlsplit(value if "//" in value else f"//{value}").hostname or ""
    except ValueError:
        return ""


def _local_only(request: Request) -> None:
    """Without tokens: only requests addressed to loopback, and none a browser sends from another site."""
    if not is_loopback(_host_of(request.headers.get("host", ""))):
        raise HTTPException(403, f"without a token this API answers only requests to a loopback host: set {TOKEN_ENV}")
    origin = request.headers.get("origin")
    if origin is not None and not is_loopback(_host_of(origin)):
        raise HTTPException(403, "a request from another site's page is refused")


def grant(request: Request, token: str | None) -> str:
    """'write' or 'read' for this request presenting `token` (None: none), else 401/403: the one check
    behind every API route and every dashboard page (which reads the token from its cookie)."""
    tokens: Tokens = request.app.state.tokens
    if not tokens.required:
        _local_only(request)
        return "write"
    if token is None:
        raise HTTPException(401, "a valid bearer token is required", headers={"WWW-Authenticate": "Bearer"})
    throttle: FailureThrottle = request.app.state.throttle
    address = request.client.host if request.client is not None else ""
    wait = throttle.wait(address)
    if wait:
        raise HTTPException(
            429, f"too many wrong tokens from {address}: retry after {wait}s", headers={"Retry-After": str(wait)}
        )
    granted = tokens.access(token)
    if granted is None:
        throttle.failed(address)
        raise HTTPException(401, "a valid bearer token is required", headers={"WWW-Authenticate": "Bearer"})
    return granted


def _access(request: Request, credentials: HTTPAuthorizationCredentials | None) -> str:
    return grant(request, None if credentials is None else credentials.credentials)


async def _reader(
    request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> None:
    _access(request, credentials)


async def _writer(
    request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> None:
    if _access(request, credentials) != "write":
        raise HTTPException(403, f"this token may only read: mutations need {TOKEN_ENV}")


can_read = Depends(_reader)
can_write = Depends(_writer)


async def _json_body(request: Request) -> None:
    """A body must be declared JSON: a form or text body is a client mistake (or a cross-site form).

    The checks here are async (they do no I/O) so that FastAPI runs them on the event
    loop: a plain function dependency costs a thread pool hop per request.
    """
    kind = request.headers.get("content-type", "application/json").split(";")[0].strip().lower()
    if kind != "application/json" and not (kind.startswith("application/") and kind.endswith("+json")):
        raise HTTPException(415, "send the body as JSON (Content-Type: application/json)")


json_body = Depends(_json_body)
