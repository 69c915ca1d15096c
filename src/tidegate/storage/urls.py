"""Database URLs: which adapter, and where.

Two forms are accepted, so a typo never silently creates a new database of
the wrong kind: `sqlite:///path/to/file.db` and `postgresql://...`.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import unquote

from tidegate.domain.errors import ConfigurationError

DEFAULT_DATABASE = "sqlite:///.tidegate/tidegate.db"
DATABASE_ENV = "TIDEGATE_DATABASE"
MASK = "***"

# scheme://user:PASSWORD@host: libpq ends the user info at the first '@' or '/'.
_USERINFO_SECRET = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://[^/@:\s]*:)([^/@]*)(@)")
# password=PASSWORD in a query string (?password=...&) or a libpq key=value string (password='a b').
_KEYWORD_SECRET = re.compile(r"(?i)(?<![a-z0-9_])((?:ssl)?password\s*=\s*)('(?:[^'\\]|\\.)*'?|[^&\s#']*)")


@dataclass(frozen=True)
class DatabaseURL:
    kind: Literal["sqlite", "postgresql"]
    url: str
    path: Path | None = None  # for sqlite


def resolve_database_url(database: str | None) -> str:
    """`None` means $TIDEGATE_DATABASE, else the embedded default."""
    return database or os.environ.get(DATABASE_ENV) or DEFAULT_DATABASE


def masked(text: str, url: str | None = None) -> str:
    """`text` (a database URL, or a message naming one) with every password replaced by ***.

    Every message, log line and page that names a database goes through here: the
    password of a URL's user info, `password=` in its query string (any case), and
    `password=` in a libpq key=value string. With `url`, its passwords are also
    removed wherever they appear in `text` on their own (e.g. quoted by a driver error).
    """
    result = _USERINFO_SECRET.sub(rf"\g<1>{MASK}\g<3>", text)
    result = _KEYWORD_SECRET.sub(rf"\g<1>{MASK}", result)
    for secret in _secrets(url) if url else ():
        result = result.replace(secret, MASK)
    return result


def _secrets(url: str) -> list[str]:
    """The passwords in `url`, as written and percent-decoded, longest first."""
    found = [match.group(2) for match in _USERINFO_SECRET.finditer(url)]
    found += [match.group(2).strip("'") for match in _KEYWORD_SECRET.finditer(url)]
    found += [unquote(secret) for secret in found]
    return sorted({secret for secret in found if secret}, key=len, reverse=True)


def parse_database_url(url: str) -> DatabaseURL:
    if url.startswith("sqlite:///"):
        raw = url[len("sqlite:///") :]
        if not raw or raw == ":memory:":
            raise ConfigurationError(
                f"database URL {masked(url)!r}: give a file path, e.g. sqlite:///.tidegate/tidegate.db "
                "(an in-memory database cannot be shared by workers)"
            )
        return DatabaseURL("sqlite", url, Path(raw))
    if url.startswith(("postgresql://", "postgres://")):
        return DatabaseURL("postgresql", url)
    raise ConfigurationError(
        f"database URL {masked(url)!r} is not supported: use sqlite:///path/to/file.db or postgresql://host/dbname"
    )
