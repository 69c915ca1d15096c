"""Named SQL blocks: `-- name: verb` headers in a queries.sql file.

Keeping SQL in .sql files (one per dialect) makes each statement readable and
reviewable as SQL, and the names tie every statement to a port verb.
"""

from __future__ import annotations

import re
from importlib import resources

_HEADER = re.compile(r"^--\s*name:\s*([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)


def load_queries(package: str, filename: str = "queries.sql") -> dict[str, str]:
    text = resources.files(package).joinpath(filename).read_text(encoding="utf-8")
    return parse_queries(text)


def parse_queries(text: str) -> dict[str, str]:
    queries: dict[str, str] = {}
    headers = list(_HEADER.finditer(text))
    for index, header in enumerate(headers):
        end = headers[index + 1].start() if index + 1 < len(headers) else len(text)
        body = text[header.end():end].strip()
        name = header.group(1)
        if name in queries:
            raise ValueError(f"query {name!r} is defined twice")
        queries[name] = body
    return queries
