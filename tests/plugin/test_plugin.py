"""The pytest plugin, tested as its users meet it: a user's test file run through pytester.

The user's app (`orders_app.py`) and test file (`user_tests.py`) are written into
pytester's folder and run by an inner pytest, which loads the plugin from its
entry point, on SQLite and (with `--tidegate-postgres`) on PostgreSQL.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import psycopg  # noqa: F401 - see below
import pytest

from tests.conftest import POSTGRES_ADMIN_URL

pytest_plugins = ["pytester"]
# pytester's in-process runs forget the modules first imported inside them, but psycopg's C part keeps
# the exception classes of its first import: imported here first, one psycopg serves every run.

HERE = Path(__file__).parent
INNER = ("-p", "no:kmock", "-p", "no:cacheprovider", "-q")  # kmock's plugin needs pytest-asyncio


def write_user_project(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(orders=(HERE / "orders_app.py").read_text())
    pytester.makepyfile(test_orders=(HERE / "user_tests.py").read_text())


def backend_options(database_url: str) -> tuple[str, ...]:
    """Nothing for SQLite; the server for PostgreSQL (the `database_url` fixture skips it when it is down)."""
    return () if database_url.startswith("sqlite") else ("--tidegate-postgres", POSTGRES_ADMIN_URL)


def test_a_users_tests_pass(pytester: pytest.Pytester, database_url: str) -> None:
    write_user_project(pytester)
    result = pytester.runpytest(*INNER, *backend_options(database_url))
    result.assert_outcomes(passed=14)


@pytest.mark.parametrize(
    ("url", "said"),
    [
        (
            "postgresql://postgres:hunter2@127.0.0.1:1/test",
            "--tidegate-postgres: postgresql://postgres:***@127.0.0.1:1/test",
        ),
        ("mysql://127.0.0.1/test", "--tidegate-postgres: expected a postgresql:// URL, got 'mysql://127.0.0.1/test'"),
    ],
)
def test_an_unusable_postgres_option_is_one_clear_error(pytester: pytest.Pytester, url: str, said: str) -> None:
    pytester.makepyfile(test_one="def test_one(tidegate_database):\n    pass\n")
    result = pytester.runpytest(*INNER, "--tidegate-postgres", url)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([f"*{said}*"])
    assert "hunter2" not in result.stdout.str()


def test_importing_tidegate_imports_neither_the_helpers_nor_pytest() -> None:
    """pytest is no dependency of tidegate: only the plugin module imports it."""
    code = (
        "import sys, tidegate; assert 'tidegate.testing' not in sys.modules;"
        " import tidegate.testing; assert 'pytest' not in sys.modules, 'pytest imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
