"""No stored string reaches a terminal raw (issue 23 item 8).

Names, tags and keys are refused at the door when they hold a control
character, but older stores, rows written behind tidegate's back and free
text (a task's error, event details, a worker's host name) may hold ESC
sequences, C1 characters or Rich markup. Every table and show command must
print them as visible escapes and literal text, on both stores; `--json`
keeps each string exact.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from tidegate import App, Concurrency, RunQueueConfig, RunStatus
from tidegate.cli.main import app as cli
from tidegate.domain.limits import TagConcurrencyLimit
from tidegate.domain.model import CycleRequest, WorkerRegistration

from .conftest import execute_sql

SHOWN_RAW = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f]")  # every control character but the line break
WORKER = "w1"

# What a terminal obeys (clear, title, clipboard, cursor moves, 8-bit CSI), what Rich would read as
# markup or emoji, and plain text around them.
pieces = st.sampled_from(
    [
        "\x1b[2J",
        "\x1b]0;owned\x07",
        "\x1b]52;c;b3duZWQ=\x07",
        "\x1b[1A\x1b[2K",
        "\x9b31m",
        "\x85",
        "\x7f",
        "\r",
        "\t",
        "\x08",
        "\n",
        "[bold red]",
        "[/]",
        "[link=https://evil.test]",
        ":smile:",
        "é",
        "🌊",
        "ok",
    ]
)
hostile = st.lists(
    st.one_of(pieces, st.text(st.characters(min_codepoint=1, max_codepoint=0x9F), max_size=4)), min_size=1, max_size=6
).map("".join)


@pytest.fixture
def shown(database_url: str) -> Iterator[dict[str, str]]:
    """A queued, a running, a failed and a completed run, a worker holding a tag scope: their ids."""
    rules = RunQueueConfig(tag_concurrency_limits=[TagConcurrencyLimit(key="env", per_unique_value=True, limit=1)])
    with App(database_url, run_queue=rules) as app:
        app.queue("lane", concurrency=Concurrency(global_limit=1))
        echo = app.task(name="echo", queue="lane")(lambda x=None: x)
        running, queued, failed, completed = (echo.options(tags={"env": "prod"}).submit().id for _ in range(4))
        app.store.register_worker(WorkerRegistration(WORKER, 4, ["lane"], False, 3600))
        app.store.cycle(CycleRequest(WORKER, ["lane"], [], [], 1, 3600))
        assert app.store.get_run(running).status is RunStatus.RUNNING  # type: ignore[union-attr]
        for run_id, status in ((failed, "failed"), (completed, "completed")):
            execute_sql(database_url, "UPDATE tidegate_runs SET status = ? WHERE id = ?", (status, run_id))
        yield {"running": running, "queued": queued, "failed": failed, "completed": completed}


def poison(database_url: str, runs: dict[str, str], text: str) -> None:
    """Write `text` into every free-text field the CLI prints, behind tidegate's back."""
    as_json = "?" if database_url.startswith("sqlite") else "CAST(? AS jsonb)"
    document = json.dumps({"env": text})
    statements: list[tuple[str, tuple[Any, ...]]] = [
        (f"UPDATE tidegate_runs SET tags = {as_json}, args = {as_json}", (document, json.dumps({"x": text}))),
        ("UPDATE tidegate_runs SET task = ?, concurrency_key = ? WHERE id = ?", (text, text, runs["failed"])),
        ("UPDATE tidegate_runs SET concurrency_key = ? WHERE id = ?", (text, runs["queued"])),
        ("UPDATE tidegate_runs SET error = ? WHERE id = ?", (text, runs["failed"])),
        (f"UPDATE tidegate_runs SET result = {as_json} WHERE id = ?", (json.dumps({"out": text}), runs["completed"])),
        (f"UPDATE tidegate_events SET metadata = {as_json}", (json.dumps({"detail": text, "error": text}),)),
        ("UPDATE tidegate_workers SET id = ?", (text,)),
        ("UPDATE tidegate_runs SET worker_id = ? WHERE worker_id IS NOT NULL", (text,)),
        ("UPDATE tidegate_holders SET worker_id = ?", (text,)),
        ("UPDATE tidegate_holders SET scope = ? WHERE scope <> 'queue:lane'", (f"tag:env={text}",)),
    ]
    if not database_url.startswith("sqlite"):  # a run's own scopes are in its row (0030_run_scopes.sql)
        renamed = "UPDATE tidegate_runs SET held_scopes = jsonb_build_array('queue:lane', CAST(? AS text))"
        statements.append((f"{renamed} WHERE held_scopes IS NOT NULL", (f"tag:env={text}",)))
    for statement, params in statements:
        execute_sql(database_url, statement, params)


def invoke(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args), env={"COLUMNS": "120", "NO_COLOR": "1"})


def commands(runs: dict[str, str]) -> list[list[str]]:
    return [
        ["runs", "list"],
        *(["runs", "show", run_id] for run_id in runs.values()),
        ["queue", "list"],
        ["queue", "why", runs["queued"]],
        ["workers", "list"],
        ["limits", "list"],
        ["pools", "list"],
        ["tasks", "list"],
    ]


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=hostile)
def test_no_command_prints_a_stored_control_character(shown: dict[str, str], database_url: str, text: str) -> None:
    poison(database_url, shown, text)
    for command in commands(shown):
        result = invoke(*command, "--database", database_url)
        assert result.exit_code == 0, (command, result.output)
        for stream in (result.stdout, result.stderr):
            raw = SHOWN_RAW.search(stream)
            assert raw is None, f"{command}: {raw.group()!r} printed raw in {stream!r}"  # type: ignore[union-attr]


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=hostile)
def test_json_output_keeps_every_string_exact(shown: dict[str, str], database_url: str, text: str) -> None:
    poison(database_url, shown, text)
    result = invoke("runs", "show", shown["failed"], "--json", "--database", database_url)
    assert result.exit_code == 0, result.output
    assert not re.search(r"[\x00-\x1f\x7f-\x9f]", result.stdout.replace("\n", "")), repr(result.stdout)
    document = json.loads(result.stdout)
    assert (document["task"], document["error"], document["tags"]) == (text, text, {"env": text})
    assert all(event["metadata"]["detail"] == text for event in document["events"])
    listed = json.loads(invoke("runs", "list", "--json", "--database", database_url).stdout)
    assert {run["tags"]["env"] for run in listed["runs"]} == {text}


def test_markup_and_emoji_codes_print_as_typed(shown: dict[str, str], database_url: str) -> None:
    text = "[bold red]boom[/] [link=https://evil.test]x[/link] :smile:"
    poison(database_url, shown, text)
    shown_run = invoke("runs", "show", shown["failed"], "--database", database_url)
    assert shown_run.stdout.count(text) >= 3, shown_run.stdout  # task, concurrency key, error (tags, events...)
    listed = invoke("runs", "list", "--database", database_url)
    assert "boom" in listed.stdout and "😄" not in listed.stdout and "[/]" in listed.stdout, listed.stdout


def test_the_worker_log_shows_an_error_s_control_characters_as_escapes() -> None:
    """`tidegate worker` logs each failed attempt's error line (and tracebacks): shown, never obeyed."""
    script = (
        "from tidegate.cli.worker import configure_logging; import logging; configure_logging('info'); "
        "logging.getLogger('tidegate.worker').info('run 1 failed: %s', 'boom\\x1b[2J\\x9b1;1H\\nline 2')"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60)
    assert "run 1 failed: boom\\x1b[2J\\x9b1;1H\nline 2" in result.stderr, repr(result.stderr)
    assert SHOWN_RAW.search(result.stderr) is None, repr(result.stderr)
