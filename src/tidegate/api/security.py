"""Who may call the API: bearer tokens from the environment, checked in constant time.

Secure by default: with no token the server answers only on loopback (the
`serve` command refuses a wider bind), so a fresh install is never an open
door. `TIDEGATE_API_TOKEN` grants everything; `TIDEGATE_API_READ_TOKEN` only
reads (every mutating route answers 403). With either set, every route but
`/healthz` needs one (401 without). There are no cookies, so there is no
cross-site request to forge.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.exceptions import HTTPException

from tidegate.domain.errors import ConfigurationError

TOKEN_ENV = "TIDEGATE_API_TOKEN"
READ_TOKEN_ENV = "TIDEGATE_API_READ_TOKEN"

_bearer = HTTPBearer(auto_error=False, description=f"A token from {TOKEN_ENV} or {READ_TOKEN_ENV}.")


@dataclass(frozen=True)
class Tokens:
    full: str | None = None
    read: str | None = None

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
    if not is_loopback(host) and not tokens.required:
        raise ConfigurationError(
            f"refusing to listen on {host} without a token: set {TOKEN_ENV} (and optionally "
            f"{READ_TOKEN_ENV}), or bind to 127.0.0.1"
        )


def _access(request: Request, credentials: HTTPAuthorizationCredentials | None) -> str:
    tokens: Tokens = request.app.state.tokens
    if not tokens.required:
        return "write"
    granted = None if credentials is None else tokens.access(credentials.credentials)
    if granted is None:
        raise HTTPException(401, "a valid bearer token is required", headers={"WWW-Authenticate": "Bearer"})
    return granted


def _reader(request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]) -> None:
    _access(request, credentials)


def _writer(request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]) -> None:
    if _access(request, credentials) != "write":
        raise HTTPException(403, f"this token may only read: mutations need {TOKEN_ENV}")


can_read = Depends(_reader)
can_write = Depends(_writer)
