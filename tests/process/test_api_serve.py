"""`tidegate serve` as an operator runs it: a process on a loopback port, driven with curl.

The calls of the HTTP walk-through (docs/how-to/http-service.md, whose own tasks.py
tests/docs/test_http_walkthrough.py checks it against), here over a real socket: submit
with curl, a worker process runs the run, curl shows its result; past the queue's ceiling curl
gets 429 with Retry-After. A non-loopback bind without a token is refused
with one line before anything listens.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator

import pytest

from tests.conftest import REPO_ROOT, WorkerProcesses, wait_until

APP = "tests.apps.http_tasks:app"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _environment(database_url: str, **extra: str) -> dict[str, str]:
    environment = {key: value for key, value in os.environ.items() if not key.startswith("TIDEGATE_API_")}
    path = os.pathsep.join(filter(None, [str(REPO_ROOT / "src"), str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
    return {**environment, "PYTHONPATH": path, "TIDEGATE_DATABASE": database_url, **extra}


def curl(*arguments: str) -> str:
    return subprocess.run(["curl", "-s", *arguments], check=True, capture_output=True, text=True, timeout=30).stdout


@pytest.fixture
def served(database_url: str, tmp_path) -> Iterator[str]:
    """`tidegate serve tests.apps.http_tasks:app` on a free port; its base URL; stopped by SIGTERM after."""
    port = _free_port()
    log = open(tmp_path / "serve.log", "wb")  # noqa: SIM115 - closed below
    process = subprocess.Popen(
        [sys.executable, "-m", "tidegate", "serve", APP, "--port", str(port), "--database", database_url],
        cwd=REPO_ROOT, env=_environment(database_url), stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    base = f"http://localhost:{port}"
    try:
        wait_until(
            lambda: process.poll() is not None or _answers(f"{base}/healthz"),
            message="tidegate serve to answer /healthz",
        )
        assert process.poll() is None, (tmp_path / "serve.log").read_text()
        yield base
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGTERM)
        # uvicorn shuts down gracefully, then re-raises the signal it caught
        assert process.wait(timeout=30) in (0, -signal.SIGTERM)
        log.close()
        assert "Application shutdown complete" in (tmp_path / "serve.log").read_text()


def _answers(url: str) -> bool:
    return subprocess.run(["curl", "-sf", url], capture_output=True, timeout=30).returncode == 0


@pytest.mark.slow
def test_curl_submits_a_worker_runs_and_curl_shows_the_result(
    served: str, database_url: str, worker_processes: WorkerProcesses
) -> None:
    submitted = json.loads(curl(
        "-XPOST", f"{served}/api/v1/runs", "-H", "Content-Type: application/json",
        "-d", '{"task":"sync_customer","args":{"customer_id":3},"tags":{"tenant":"acme"}}',
    ))  # fmt: skip
    assert submitted["status"] == "queued" and submitted["links"]["self"] == f"/api/v1/runs/{submitted['id']}"

    worker_processes.spawn(APP, database_url, max_workers=1)
    run_url = f"{served}{submitted['links']['self']}"
    wait_until(lambda: json.loads(curl(run_url))["status"] == "completed", message="the run to complete")
    shown = json.loads(curl(run_url))
    assert shown["result"] == {"synced": 3} and shown["tags"] == {"tenant": "acme"}

    listed = json.loads(curl(f"{served}/api/v1/runs?tag=tenant=acme&status=completed"))
    assert [run["id"] for run in listed["runs"]] == [submitted["id"]]


@pytest.mark.slow
def test_curl_past_the_ceiling_gets_429_with_retry_after(served: str) -> None:
    submit = ["-XPOST", f"{served}/api/v1/runs", "-H", "Content-Type: application/json", "-d", '{"task":"ingest"}']
    for _ in range(2):
        assert json.loads(curl(*submit))["status"] == "queued"
    answer = curl("-i", *submit)
    head, _, body = answer.partition("\n\n")  # text mode has turned CRLF into LF
    assert head.startswith("HTTP/1.1 429"), answer
    headers = dict(line.lower().split(": ", 1) for line in head.splitlines()[1:] if line)
    retry_after = int(headers["retry-after"])
    assert retry_after >= 1 and json.loads(body)["retry_after"] == retry_after


def test_a_non_loopback_bind_without_a_token_is_refused_in_one_line(sqlite_url: str) -> None:
    finished = subprocess.run(
        # 192.0.2.1 (TEST-NET-1) is on no interface here: were the refusal broken, the bind would
        # fail rather than listen beyond loopback.
        [sys.executable, "-m", "tidegate", "serve", "--host", "192.0.2.1", "--port", str(_free_port())],
        cwd=REPO_ROOT, env=_environment(sqlite_url), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert finished.returncode == 1
    lines = finished.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: refusing to listen on 192.0.2.1 without a token"), lines
    assert "TIDEGATE_API_TOKEN" in lines[0] and "Traceback" not in finished.stderr


def test_a_busy_port_is_refused_in_one_line_with_no_banner(sqlite_url: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        finished = subprocess.run(
            [sys.executable, "-m", "tidegate", "serve", "--port", str(port)],
            cwd=REPO_ROOT, env=_environment(sqlite_url), capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    assert finished.returncode == 1
    lines = (finished.stdout + finished.stderr).strip().splitlines()
    assert lines == [f"error: cannot listen on 127.0.0.1:{port}: Address already in use"], lines


@pytest.mark.parametrize(
    ("token", "message"),
    [
        ("a", "error: refusing to listen on 192.0.2.1 with a 1-character TIDEGATE_API_TOKEN"),
        (" ", "error: TIDEGATE_API_TOKEN is empty or has a character no client can send"),  # none could sign in
    ],
)
def test_a_non_loopback_bind_with_a_weak_token_is_refused_in_one_line(sqlite_url: str, token, message) -> None:
    finished = subprocess.run(
        [sys.executable, "-m", "tidegate", "serve", "--host", "192.0.2.1", "--port", str(_free_port())],
        cwd=REPO_ROOT, env=_environment(sqlite_url, TIDEGATE_API_TOKEN=token), capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert finished.returncode == 1
    lines = finished.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(message), lines
    assert "secrets.token_urlsafe(32)" in lines[0] and "Traceback" not in finished.stderr
