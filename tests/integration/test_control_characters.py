"""Names, tags and keys with a control character are refused at every door (issue 23 item 8).

A terminal obeys C0, DEL and C1 characters instead of printing them, so a tag
value `\\x1b[2J` would clear the screen of whoever runs `tidegate runs show`.
Python, the CLI and HTTP refuse each such name, tag or key, on both stores,
with one line naming the field and the character as its escape (never raw),
and store nothing.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.apps.api import local_client
from tidegate import App, Concurrency, Partition, TidegateError
from tidegate.cli.main import app as cli
from tidegate.domain.limits import TagConcurrencyLimit
from tidegate.engine.operators import limits

from .conftest import execute_sql

CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")  # C0, DEL, C1
TABLES = ("runs", "events", "tasks", "queues", "pools", "schedules", "limit_overrides")


def stored(database_url: str) -> tuple[int, ...]:
    """Rows of every table a refused name could have reached."""
    return tuple(execute_sql(database_url, f"SELECT count(*) FROM tidegate_{table}")[0][0] for table in TABLES)


@pytest.fixture
def echo_app(database_url: str) -> Iterator[App]:
    with App(database_url) as app:
        app.task(name="echo")(lambda: None).submit()  # the task, its queue and the store are in use
        yield app


def _task(app: App, name: str) -> Any:
    return app.task(name=name)(lambda: None).submit()


def _schedule(app: App, name: str) -> Any:
    return app.schedule("echo", cron="0 9 * * *", name=name)


PYTHON = [
    pytest.param(lambda app: app.tasks["echo"].options(tags={"env": "\x1b[2J"}).submit(), "tag 'env'", "\\x1b",
                 id="tag value ESC"),
    pytest.param(lambda app: app.tasks["echo"].options(tags={"env": "a\x9b31m"}).submit(), "tag 'env'", "\\x9b",
                 id="tag value C1"),
    pytest.param(lambda app: app.tasks["echo"].options(tags={"env": "a\x7f"}).submit(), "tag 'env'", "\\x7f",
                 id="tag value DEL"),
    pytest.param(lambda app: app.tasks["echo"].options(tags={"env\n": "x"}).submit(), "tag name", "\\n",
                 id="tag key newline"),
    pytest.param(lambda app: app.submit("echo", concurrency_key="\x1b]0;owned\x07"), "concurrency_key", "\\x1b",
                 id="concurrency key OSC"),
    pytest.param(lambda app: app.submit("echo", concurrency_key="k\x85"), "concurrency_key", "\\x85",
                 id="concurrency key C1"),
    pytest.param(lambda app: _task(app, "job\n"), "task name", "\\n", id="task name newline"),
    pytest.param(lambda app: app.queue("lane\n"), "queue name", "\\n", id="queue name newline"),
    pytest.param(lambda app: app.set_pool_limit("warehouse\n", 3), "pool name", "\\n", id="pool name newline"),
    pytest.param(lambda app: _schedule(app, "nightly\n"), "schedule name", "\\n", id="schedule name newline"),
    pytest.param(lambda app: TagConcurrencyLimit(key="env", value="\x1b[2J", limit=1), "tag limit env", "\\x1b",
                 id="tag limit value"),
    pytest.param(lambda app: limits.set_limit(app.store, "tag:env=\x1b[2J", 2), "limit target", "\\x1b",
                 id="limit target"),
]  # fmt: skip


@pytest.mark.parametrize(("call", "field", "escape"), PYTHON)
def test_python_refuses_a_control_character_naming_field_and_escape(
    echo_app: App, database_url: str, call: Callable[[App], Any], field: str, escape: str
) -> None:
    before = stored(database_url)
    with pytest.raises(TidegateError) as refused:
        call(echo_app)
    message = str(refused.value)
    assert field in message and escape in message, message
    assert "\n" not in message and not CONTROL.search(message), repr(message)
    assert stored(database_url) == before


def invoke(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args), env={"COLUMNS": "200", "NO_COLOR": "1"})


CLI = [
    pytest.param(["submit", "echo", "--tag", "env=\x1b[2J"], "tag 'env'", "\\x1b", id="submit tag"),
    pytest.param(["submit", "echo", "--concurrency-key", "\x1b]52;c;b3duZWQ=\x07"], "concurrency_key", "\\x1b",
                 id="submit concurrency key"),
    pytest.param(["submit", "echo", "--queue", "default\n"], "queue name", "\\n", id="submit queue"),
    pytest.param(["limits", "set", "tag:env=\x9b2J", "2"], "limit target", "\\x9b", id="limits set"),
    pytest.param(["pools", "set", "warehouse\n", "3", "--create"], "pool name", "\\n", id="pools set"),
    pytest.param(["queue", "pause", "default\n"], "queue name", "\\n", id="queue pause"),
    pytest.param(["runs", "show", "\x1b[2J"], "run id", "\\x1b", id="runs show"),
]  # fmt: skip


@pytest.mark.parametrize(("args", "field", "escape"), CLI)
def test_cli_refuses_a_control_character_in_one_line(
    echo_app: App, database_url: str, args: list[str], field: str, escape: str
) -> None:
    before = stored(database_url)
    result = invoke(*args, "--database", database_url)
    assert result.exit_code == 1, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert field in lines[0] and escape in lines[0], lines[0]
    assert not CONTROL.search(result.stderr.replace("\n", "")), repr(result.stderr)
    assert stored(database_url) == before


HTTP = [
    pytest.param("post", "/api/v1/runs", {"task": "echo", "tags": {"env": "\x1b[2J"}}, "tags", id="submit tag"),
    pytest.param("post", "/api/v1/runs", {"task": "echo", "concurrency_key": "\x9b2J"}, "concurrency_key",
                 id="submit concurrency key"),
    pytest.param("post", "/api/v1/runs/batch", {"runs": [{"task": "echo"}, {"task": "echo", "tags": {"e": "\x85"}}]},
                 "runs.1.tags", id="batch tag"),
    pytest.param("put", "/api/v1/limits", {"target": "tag:env=\x1b[2J", "limit": 2}, "target", id="limits set"),
    pytest.param("put", "/api/v1/pools/warehouse%0A", {"limit": 3}, "name", id="pools set"),
    pytest.param("get", "/api/v1/runs?tag=env%3D%1B%5B2J", None, "tag", id="runs tag filter"),
]  # fmt: skip


@pytest.mark.parametrize(("method", "path", "body", "field"), HTTP)
def test_http_refuses_a_control_character_naming_the_field(
    echo_app: App, database_url: str, method: str, path: str, body: Any, field: str
) -> None:
    client = local_client(echo_app.asgi())
    before = stored(database_url)
    response = client.request(method, path, json=body)
    assert response.status_code == 422, response.text
    answer = response.json()
    assert answer["field"] == field, answer
    assert "control character" in answer["detail"] and not CONTROL.search(answer["detail"]), answer
    assert stored(database_url) == before


def test_a_partition_key_made_from_an_arg_holds_its_control_characters_escaped(database_url: str) -> None:
    """Args may hold control characters; the partition key tidegate derives from one never does."""
    with App(database_url) as app:
        app.queue("lane", concurrency=Concurrency(global_limit=1, partition=Partition(by_args=["customer"])))
        sync = app.task(name="sync", queue="lane")(lambda customer: None)
        hostile, plain = sync.submit(customer="\x1b[2J\x85"), sync.submit(customer="acme")
        run = app.store.get_run(hostile.id)
        assert run is not None and run.args == {"customer": "\x1b[2J\x85"}  # the arg is kept exact
        assert run.partition == 'customer="\\u001b[2J\\u0085"'
        assert app.store.get_run(plain.id).partition == "customer=acme"  # type: ignore[union-attr]
