"""Database URLs: which adapter, and where.

Two forms are accepted, so a typo never silently creates a new database of
the wrong kind: `sqlite:///path/to/file.db` and `postgresql://...`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from tidegate.domain.errors import ConfigurationError

DEFAULT_DATABASE = "sqlite:///.tidegate/tidegate.db"
DATABASE_ENV = "TIDEGATE_DATABASE"


@dataclass(frozen=True)
class DatabaseURL:
    kind: Literal["sqlite", "postgresql"]
    url: str
    path: Path | None = None  # for sqlite


def resolve_database_url(database: str | None) -> str:
    """`None` means $TIDEGATE_DATABASE, else the embedded default."""
    return database or os.environ.get(DATABASE_ENV) or DEFAULT_DATABASE


def parse_database_url(url: str) -> DatabaseURL:
    if url.startswith("sqlite:///"):
        raw = url[len("sqlite:///"):]
        if not raw or raw == ":memory:":
            raise ConfigurationError(
                f"database URL {url!r}: give a file path, e.g. sqlite:///.tidegate/tidegate.db "
                "(an in-memory database cannot be shared by workers)"
            )
        return DatabaseURL("sqlite", url, Path(raw))
    if url.startswith(("postgresql://", "postgres://")):
        return DatabaseURL("postgresql", url)
    raise ConfigurationError(
        f"database URL {url!r} is not supported: use sqlite:///path/to/file.db or postgresql://host/dbname"
    )
