"""`tidegate serve`'s log as an operator's collector reads it: with `--log-format json` (or
TIDEGATE_LOG_FORMAT=json) every line the process writes, uvicorn's included, is one JSON object with
the stable fields, and each request has an access line with its method, path, status, duration and
client; the default stays text a person reads."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, wait_until
from tests.process.test_api_serve import _environment, _free_port

APP = "tests.apps.http_tasks:app"


def _status(method: str, url: str, body: bytes | None = None) -> int:
    request = urllib.request.Request(url, method=method, data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return error.code
    except OSError:
        return 0


def _serve_and_ask(database_url: str, log: Path, *options: str, **environment: str) -> list[str]:
    """Start `tidegate serve`, make a 200, a 404 and a 422 request, stop it with SIGTERM; its output's lines."""
    port = _free_port()
    with log.open("wb") as output:
        process = subprocess.Popen(
            [sys.executable, "-m", "tidegate", "serve", APP, "--port", str(port), "--database", database_url, *options],
            cwd=REPO_ROOT, env=_environment(database_url, **environment), stdout=output, stderr=subprocess.STDOUT,
        )  # fmt: skip
        base = f"http://127.0.0.1:{port}"
        try:
            wait_until(
                lambda: process.poll() is not None or _status("GET", f"{base}/healthz") == 200,
                message="tidegate serve to answer /healthz",
            )
            assert process.poll() is None, log.read_text()
            assert _status("GET", f"{base}/api/v1/nowhere") == 404
            assert _status("POST", f"{base}/api/v1/runs", b'{"task": 7}') == 422
        finally:
            if process.poll() is None:
                os.kill(process.pid, signal.SIGTERM)
            assert process.wait(timeout=30) in (0, -signal.SIGTERM)
    return log.read_text().splitlines()


@pytest.mark.parametrize("chosen", ["option", "environment"])
def test_json_every_line_is_an_object_and_requests_have_access_lines(sqlite_url: str, tmp_path, chosen) -> None:
    options, environment = (
        (["--log-format", "json"], {}) if chosen == "option" else ([], {"TIDEGATE_LOG_FORMAT": "json"})
    )
    lines = _serve_and_ask(sqlite_url, tmp_path / "serve.log", *options, **environment)

    records = [json.loads(line) for line in lines]  # every line, or this raises naming the one that is not
    for record in records:
        assert {"ts", "level", "logger", "message"} <= set(record), record
        assert record["level"] in ("debug", "info", "warning", "error") and "color_message" not in record
    loggers = {record["logger"] for record in records}
    assert {"tidegate.serve", "uvicorn.error", "tidegate.access"} <= loggers and "uvicorn.access" not in loggers
    assert any(record["message"] == "Application shutdown complete." for record in records)

    access = {(record["method"], record["path"]): record for record in records if record["logger"] == "tidegate.access"}
    assert access[("GET", "/healthz")]["status"] == 200
    assert access[("GET", "/api/v1/nowhere")]["status"] == 404
    assert access[("POST", "/api/v1/runs")]["status"] == 422
    for record in access.values():
        assert record["duration_ms"] >= 0 and record["client"].startswith("127.0.0.1:")


def test_text_is_the_default_with_the_same_access_lines(sqlite_url: str, tmp_path) -> None:
    lines = _serve_and_ask(sqlite_url, tmp_path / "serve.log")

    assert not any(line.startswith("{") for line in lines), lines
    assert any(" INFO tidegate.serve: tidegate API and dashboard on http://127.0.0.1:" in line for line in lines)
    assert any(line.endswith("uvicorn.error: Application shutdown complete.") for line in lines), lines
    assert any(
        " INFO tidegate.access: 127.0.0.1:" in line and '"POST /api/v1/runs HTTP/1.1" 422 ' in line for line in lines
    )


def test_a_log_format_that_is_not_one_is_refused_in_one_line(sqlite_url: str) -> None:
    finished = subprocess.run(
        [sys.executable, "-m", "tidegate", "serve", "--port", str(_free_port()), "--log-format", "xml"],
        cwd=REPO_ROOT, env=_environment(sqlite_url), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert finished.returncode != 0
    assert finished.stderr.strip().splitlines() == ["error: --log-format: 'xml' is not a log format: use text or json"]
