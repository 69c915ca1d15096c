"""Named SQL blocks: `-- name: verb` headers in an adapter's .sql files.

Keeping SQL in .sql files makes each statement readable and reviewable as
SQL, and the names tie every statement to a port verb. Each adapter keeps one
file per aggregate, named like its module (runs.sql beside runs.py); the
names are one namespace across the files.

A block is sent as it is loaded: without its comment lines and indentation,
which are for readers. psycopg caches the parse of a statement only up to
4,096 characters (`psycopg._queries.MAX_CACHED_STATEMENT_LENGTH`); a longer one
is parsed again on every call, and the claim's and the cycle's statements
passed that with their comments in (tests/unit/test_sqlfile.py keeps every
statement under it). No statement has a string literal that spans lines, so
lines can be trimmed without changing one.
"""

from __future__ import annotations

import re
from importlib import resources

_HEADER = re.compile(r"^--\s*name:\s*([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)


def load_queries(package: str) -> dict[str, str]:
    """Every named block of the package's own .sql files (not of its subpackages)."""
    queries: dict[str, str] = {}
    for entry in sorted(resources.files(package).iterdir(), key=lambda entry: entry.name):
        if entry.name.endswith(".sql") and entry.is_file():
            for name, body in parse_queries(entry.read_text(encoding="utf-8")).items():
                if name in queries:
                    raise ValueError(f"query {name!r} is defined twice")
                queries[name] = body
    return queries


def parse_queries(text: str) -> dict[str, str]:
    queries: dict[str, str] = {}
    headers = list(_HEADER.finditer(text))
    for index, header in enumerate(headers):
        end = headers[index + 1].start() if index + 1 < len(headers) else len(text)
        body = _sent(text[header.end() : end])
        name = header.group(1)
        if name in queries:
            raise ValueError(f"query {name!r} is defined twice")
        queries[name] = body
    return queries


def _sent(block: str) -> str:
    """The block as the server gets it: each line trimmed, comment lines and blank lines dropped."""
    lines = (line.strip() for line in block.splitlines())
    return "\n".join(line for line in lines if line and not line.startswith("--"))
