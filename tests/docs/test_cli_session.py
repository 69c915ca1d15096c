"""The command-line session of docs/tutorial/first-task.md answers as the page shows.

Its `tidegate` lines run, in order, against the page's own `tasks.py` (registered by a worker,
as the page's first shell does): a line the page answers with `error: ...` must fail with
exactly that line, any other must succeed, and `tasks list` must name every task it shows.
"""

from __future__ import annotations

import importlib
import shlex
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.docs.examples import REPO_ROOT, python_blocks
from tidegate.cli.main import app as cli

PAGE = REPO_ROOT / "docs" / "tutorial" / "first-task.md"


def session() -> list[tuple[list[str], list[str]]]:
    """(argv after `tidegate`, the lines shown under it) for each `$ tidegate` line but the worker."""
    text = PAGE.read_text()
    console = text.split("gives `name=`", 1)[1].split("```console", 1)[1].split("```", 1)[0]
    commands: list[tuple[list[str], list[str]]] = []
    for line in console.strip().splitlines():
        if line.startswith("$ tidegate "):
            commands.append((shlex.split(line[len("$ tidegate ") :], comments=True), []))
        elif commands:
            commands[-1][1].append(line)
    return commands


def test_the_first_task_session_answers_as_shown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (file_block,) = [block for block in python_blocks(PAGE) if block.mark == "file"]
    (tmp_path / "tasks.py").write_text(file_block.code)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TIDEGATE_DATABASE", raising=False)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "tasks", raising=False)
    tasks = importlib.import_module("tasks")
    try:
        tasks.app.worker().start().stop()  # the page's first shell: a worker registers the tasks
    finally:
        tasks.app.close()
    commands = session()
    assert len(commands) >= 4, "the page's session was not found"
    for argv, shown in commands:
        result = CliRunner().invoke(cli, argv, env={"COLUMNS": "250", "NO_COLOR": "1"})
        errors = [line for line in shown if line.startswith("error: ")]
        if errors:
            assert result.exit_code == 1 and result.stderr.strip() == errors[0], (argv, result.output)
        else:
            assert result.exit_code == 0, (argv, result.output)
        if argv[:2] == ["tasks", "list"]:
            for name in ("tasks.add", "tasks.fetch"):
                assert name in result.stdout
