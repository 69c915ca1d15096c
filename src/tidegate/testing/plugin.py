"""The pytest plugin, registered by installing tidegate (entry point `pytest11`: `tidegate`).

Fixtures, each fresh per test:

- `tidegate_database`: a URL: a new SQLite file, or with `--tidegate-postgres URL`
  a new schema of that PostgreSQL database (dropped after the test);
- `tidegate_clock`: the test's `ControlledClock` (`advance("2h")`, `freeze()`); every
  App built during the test without a clock of its own reads it;
- `tidegate_app`: an App on both (`tidegate_app.database_url` for an app your code builds);
- `tidegate_drain`: `tidegate_drain(app)` runs everything due through the real claim
  and returns what ran; the apps it drained are closed after the test.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tidegate.app import App
from tidegate.app.settings import using_clock
from tidegate.domain.errors import TidegateError
from tidegate.testing.clock import ControlledClock
from tidegate.testing.databases import IsolatedApp, create_schema, drop_schema, schema_url, sqlite_url
from tidegate.testing.drain import DrainResult, drain

POSTGRES_OPTION = "--tidegate-postgres"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("tidegate")
    group.addoption(
        POSTGRES_OPTION,
        metavar="URL",
        default=None,
        help="give each test's tidegate_database a fresh schema of this PostgreSQL database"
        " (default: a fresh SQLite file per test)",
    )


@pytest.fixture
def tidegate_clock() -> Iterator[ControlledClock]:
    """The test's time; apps built meanwhile without a `clock=` read it too."""
    clock = ControlledClock()
    with using_clock(clock):
        yield clock


@pytest.fixture
def tidegate_database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database of this test alone: a SQLite file, or a PostgreSQL schema with --tidegate-postgres."""
    url = request.config.getoption(POSTGRES_OPTION)
    if url is None:
        yield sqlite_url(tmp_path)
        return
    refused: str | None = None
    try:
        schema = create_schema(url)
    except TidegateError as error:
        refused = str(error)
    if refused is not None:  # one line, no traceback: its locals would show the URL's password
        pytest.fail(refused, pytrace=False)
    try:
        yield schema_url(url, schema)
    finally:
        drop_schema(url, schema)


@pytest.fixture
def tidegate_app(tidegate_database: str, tidegate_clock: ControlledClock) -> Iterator[IsolatedApp]:
    """An App on the test's database and clock, closed after the test."""
    app = IsolatedApp(tidegate_database, clock=tidegate_clock)
    try:
        yield app
    finally:
        app.close()


class Drainer:
    """`tidegate_drain(app, max_workers=1, cap=1000, queues=None)`: see `tidegate.testing.drain`."""

    def __init__(self) -> None:
        self.apps: list[App] = []

    def __call__(self, app: App, **options: Any) -> DrainResult:
        if not isinstance(app, App):
            raise TypeError(f"tidegate_drain takes a tidegate.App, got {app!r}")
        if all(app is not seen for seen in self.apps):
            self.apps.append(app)
        return drain(app, **options)

    def close(self) -> None:
        """Close the drained apps' stores: their connections must not outlive the test's database."""
        for app in self.apps:
            app.close()


@pytest.fixture
def tidegate_drain(tidegate_database: str) -> Iterator[Drainer]:
    """Torn down before `tidegate_database` (it depends on it), so apps close before their schema goes."""
    drainer = Drainer()
    try:
        yield drainer
    finally:
        drainer.close()
