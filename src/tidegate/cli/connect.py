"""Opening the store for commands that read or change existing runs.

These commands open with `migrate=False`: looking at runs must not change a
schema behind an operator's back, and a database from another tidegate
version is reported (with the fix) instead of being misread. An embedded
file that does not exist is refused rather than silently created, because
that is almost always a typo in the path or the wrong working directory.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import closing, contextmanager

from tidegate.bootstrap import Store, open_store, parse_database_url
from tidegate.cli.errors import CommandError


def check_exists(url: str) -> None:
    parsed = parse_database_url(url)
    if parsed.kind == "sqlite" and parsed.path is not None and not parsed.path.exists():
        raise CommandError(
            f"no database at {parsed.path} (wrong directory? pass --database, or create it with 'tidegate db migrate')"
        )


@contextmanager
def existing_store(url: str) -> Iterator[Store]:
    check_exists(url)
    with closing(open_store(url, migrate=False)) as store:
        yield store
