"""A database password never appears in a message, a log line or the CLI's output.

PostgreSQL here trusts every local connection, so a URL may carry any
password: it is ignored by the server and must be hidden by tidegate. Each
surface is checked with the password in the user info and in the query
string; the SQLite variants put it where an unsupported or odd URL would.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from tidegate import App, ConfigurationError, StoreUnavailable, UnknownTask
from tidegate.cli.main import app as cli
from tidegate.storage.urls import masked

from .conftest import REPO_ROOT

SECRET = "S3cretPW"


def with_secret(url: str, where: str) -> str:
    """`url` carrying SECRET in its user info or in its query string (libpq keys are lower case)."""
    if where == "userinfo":
        assert "://postgres@" in url
        return url.replace("://postgres@", f"://postgres:{SECRET}@", 1)
    return url + ("&" if "?" in url else "?") + f"password={SECRET}"


@pytest.fixture(params=["userinfo", "query"])
def secret_url(request: pytest.FixtureRequest, postgres_url: str) -> str:
    return with_secret(postgres_url, request.param)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://postgres:S3cretPW@127.0.0.1:5432/x", "postgresql://postgres:***@127.0.0.1:5432/x"),
        ("postgres://u:pa:S3cretPW@h/x?sslmode=off", "postgres://u:***@h/x?sslmode=off"),
        ("postgresql://u@h/x?sslmode=off&PASSWORD=S3cretPW&a=b", "postgresql://u@h/x?sslmode=off&PASSWORD=***&a=b"),
        ("postgresql://u@h/x?password=S3cretPW", "postgresql://u@h/x?password=***"),
        ("host=h password=S3cretPW user=u", "host=h password=*** user=u"),
        ("host=h password = 'S3cret PW\\' x' user=u", "host=h password = *** user=u"),
        ("host=h sslpassword=S3cretPW", "host=h sslpassword=***"),
        ("sqlite:///.tidegate/tidegate.db", "sqlite:///.tidegate/tidegate.db"),
        ("postgresql://h:5432/x", "postgresql://h:5432/x"),
    ],
)
def test_masking_covers_user_info_query_strings_and_keyword_strings(url, shown):
    assert masked(url) == shown
    assert masked(f"cannot reach {url} (twice)") == f"cannot reach {shown} (twice)"


def test_masking_with_the_url_also_hides_its_password_quoted_alone():
    url = "postgresql://u:S3cr%2FetPW@h/x"
    assert masked('bad token "S3cr%2FetPW" and "S3cr/etPW"', url) == 'bad token "***" and "***"'


def test_the_python_api_never_shows_the_password(secret_url):
    with App(secret_url) as app, pytest.raises(UnknownTask) as caught:
        app.submit("nope")
    assert SECRET not in str(caught.value)
    assert "***" in str(caught.value)


def test_the_python_api_on_sqlite_masks_a_password_in_the_path(sqlite_url):
    with App(f"{sqlite_url}?password={SECRET}") as app, pytest.raises(UnknownTask) as caught:
        app.submit("nope")
    assert SECRET not in str(caught.value)


@pytest.mark.parametrize(
    "url",
    [
        f"postgresql://postgres:{SECRET}@127.0.0.1:1/x",  # nothing listens on port 1
        f"postgresql://postgres:{SECRET}%zz@127.0.0.1:5432/x",  # the driver quotes the bad token
        f"postgresql://postgres@127.0.0.1:1/x?password={SECRET}",
        f"mysql://root:{SECRET}@127.0.0.1/x",  # unsupported: the URL is quoted back
        "sqlite:///{tmp}/a-file/t.db?password=" + SECRET,  # the folder is a file: cannot create
    ],
    ids=["unreachable", "bad-escape", "query-unreachable", "unsupported", "sqlite-cannot-create"],
)
def test_connection_and_url_errors_never_show_the_password(url, tmp_path):
    (tmp_path / "a-file").touch()
    with pytest.raises((StoreUnavailable, ConfigurationError)) as caught:
        App(url.replace("{tmp}", str(tmp_path))).store  # noqa: B018 - opening is what fails
    assert SECRET not in str(caught.value), caught.value


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args), env={"COLUMNS": "250", "NO_COLOR": "1"})


def test_cli_submit_and_runs_show_never_print_the_password(secret_url):
    App(secret_url).store.close()  # migrated, so the commands reach the lookups
    for args in (["submit", "nope"], ["runs", "show", "01ARZ3NDEKTSV4RRFFQ69G5FAV"], ["queue", "why", "x"]):
        result = invoke(*args, "--database", secret_url)
        assert result.exit_code == 1, result.output
        assert SECRET not in result.output + result.stderr
        assert "Traceback" not in result.output


def test_cli_db_migrate_names_the_database_masked(secret_url):
    result = invoke("db", "migrate", "--database", secret_url)
    assert result.exit_code == 0, result.output
    assert "***" in result.output
    assert SECRET not in result.output + result.stderr


def test_cli_on_sqlite_never_prints_the_password(tmp_path):
    result = invoke("submit", "nope", "--database", f"sqlite:///{tmp_path}/none.db?password={SECRET}")
    assert result.exit_code == 1
    assert SECRET not in result.output + result.stderr
    assert "***" in result.stderr


def test_worker_log_lines_never_show_the_password(secret_url, tmp_path):
    """The worker's start line, its debug log (the driver's and the pool's included), its stop line."""
    App(secret_url).store.close()
    environment = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
        "TIDEGATE_TEST_LOG": str(tmp_path / "log"),
    }
    environment.pop("TIDEGATE_DATABASE", None)
    command = [sys.executable, "-m", "tidegate", "worker", "tests.apps.counted:app", "--drain"]
    command += ["--log-level", "debug", "--database", secret_url]
    done = subprocess.run(
        command, cwd=REPO_ROOT, env=environment, capture_output=True, text=True, timeout=120, check=False
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "started" in output and "***" in output, output
    assert SECRET not in output
