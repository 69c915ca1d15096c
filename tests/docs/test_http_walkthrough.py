"""The HTTP walk-through of docs/how-to/http-service.md works as written, with the page's own tasks.py.

Its `curl` lines are sent, in order, to the served app built from the page's `tasks.py` block
(task names as the decorator registers them, which the old walk-through got wrong), and each
answer is checked against what the page prints: the status line, a header, every
`"key":value` pair shown in full (values elided with `...` are not compared).
"""

from __future__ import annotations

import importlib
import json
import re
import shlex
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.docs.examples import REPO_ROOT, python_blocks

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient

PAGE = REPO_ROOT / "docs" / "how-to" / "http-service.md"
PLACEHOLDER = "01M85BWQ6Z..."
PAIR = re.compile(r'"(\w+)":("[^"]*"|-?\d+|null|true|false|\{[^{}]*\})')


@dataclass
class Call:
    method: str
    path: str
    body: str | None
    shown: list[str] = field(default_factory=list)  # the output lines the page prints after it


def walkthrough_calls() -> list[Call]:
    text = PAGE.read_text()
    console = text.split("## A walk-through", 1)[1].split("```console", 1)[1].split("```", 1)[0]
    calls: list[Call] = []
    for command, shown in _commands(console):
        if not command.startswith("curl"):
            continue
        words = shlex.split(command, comments=True)
        method = next((w[2:] for w in words if w.startswith("-X")), "GET")
        url = next(w for w in words if "localhost:8000" in w)
        body = words[words.index("-d") + 1] if "-d" in words else None
        calls.append(Call(method, url.split("localhost:8000", 1)[1], body, shown))
    return calls


def _commands(console: str) -> Iterator[tuple[str, list[str]]]:
    command: str | None = None
    shown: list[str] = []
    lines = iter(console.strip().splitlines())
    for line in lines:
        if line.startswith("$ "):
            if command is not None:
                yield command, shown
            command, shown = line[2:], []
            while command.endswith("\\"):
                command = command[:-1] + next(lines).strip()
        else:
            shown.append(line)
    if command is not None:
        yield command, shown


def test_the_walkthrough_answers_as_the_page_shows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (file_block,) = [block for block in python_blocks(PAGE) if block.mark == "file"]
    (tmp_path / file_block.value).write_text(file_block.code)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TIDEGATE_DATABASE", raising=False)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "tasks", raising=False)
    tasks = importlib.import_module("tasks")
    calls = walkthrough_calls()
    assert len(calls) >= 4, "the walk-through's curl lines were not found"
    try:
        client = TestClient(tasks.app.asgi(), base_url="http://127.0.0.1:8000")
        run_id = None
        for call in calls:
            if run_id and PLACEHOLDER in call.path:
                tasks.app.worker(queues=["default"], drain=True).run()  # "once a worker ran it"
            path = call.path.replace(PLACEHOLDER, run_id or PLACEHOLDER)
            headers = {"Content-Type": "application/json"} if call.body else {}
            answer = client.request(call.method, path, content=call.body, headers=headers)
            _check(call, answer)
            if call.method == "POST" and run_id is None:
                run_id = answer.json()["id"]
    finally:
        tasks.app.close()


def _check(call: Call, answer) -> None:  # type: ignore[no-untyped-def]
    what = f"{call.method} {call.path}"
    status = next((int(line.split()[1]) for line in call.shown if line.startswith("HTTP/")), None)
    if status is None:
        assert answer.status_code < 300, f"{what}: {answer.status_code} {answer.text}"
    else:
        assert answer.status_code == status, f"{what}: {answer.status_code} {answer.text}"
    for line in call.shown:
        name, colon, value = line.partition(": ")
        if colon and not line.startswith(("HTTP/", "{")):
            assert answer.headers.get(name) == value, f"{what}: header {name}"
    shown_json = " ".join(line for line in call.shown if line.startswith("{"))
    for key, value in PAIR.findall(shown_json):
        if "..." in value:
            continue
        assert answer.json().get(key) == json.loads(value), f"{what}: {key} is {answer.json().get(key)!r}"
