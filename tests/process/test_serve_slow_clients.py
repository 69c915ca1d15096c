"""`tidegate serve` under slow clients: a request's headers have a deadline (TIDEGATE_HEADER_TIMEOUT),
and so has its body (TIDEGATE_BODY_TIMEOUT).

uvicorn alone never closes a connection that trickles header lines (each byte
resets its keep-alive timer) or one that sends nothing at all. Here 50 slow
clients send a header line every 0.3 s to a served process whose header
timeout is 1 s, one does so for its second request on a kept-alive
connection, and one client sends nothing: each is closed within the
timeout plus slack, while an ordinary request is answered meanwhile and an
event stream is not cut by the deadline (it applies to headers, not to
responses). A client that sends its headers and then trickles the body it
declared is answered 408 at the body's deadline.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import REPO_ROOT, wait_until

TIMEOUT = 1.0
SLACK = 3.0  # the deadline is a timer on the server's loop: a loaded machine fires it a little late
TRICKLE = 8.0  # a slow client gives up after this; without a deadline it is still open then
SLOW_CLIENTS = 50


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, int]]:
    """`tidegate serve` with a 1 s header timeout on an embedded database; (host, port)."""
    port = _free_port()
    path = os.pathsep.join(filter(None, [str(REPO_ROOT / "src"), str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
    environment = {key: value for key, value in os.environ.items() if not key.startswith("TIDEGATE_")}
    environment.update(PYTHONPATH=path, TIDEGATE_HEADER_TIMEOUT=f"{TIMEOUT}s", TIDEGATE_BODY_TIMEOUT=f"{TIMEOUT}s")
    database = f"sqlite:///{tmp_path / 'slow.db'}"
    log = open(tmp_path / "serve.log", "wb")  # noqa: SIM115 - closed below
    process = subprocess.Popen(
        [sys.executable, "-m", "tidegate", "serve", "--port", str(port), "--database", database],
        cwd=REPO_ROOT, env=environment, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        wait_until(lambda: process.poll() is not None or _answers(port), message="tidegate serve to answer")
        assert process.poll() is None, (tmp_path / "serve.log").read_text()
        yield "127.0.0.1", port
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGTERM)
        process.wait(timeout=30)
        log.close()


def _answers(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


async def _slow_client(host: str, port: int, lines: bool, kept_alive: bool = False) -> tuple[float, bytes]:
    """Seconds until the server closed the connection (inf: still open after TRICKLE), and what it said.
    `kept_alive`: a first request is sent whole and answered; the second one trickles."""
    started = time.monotonic()  # before the connection: the server's deadline starts later, never earlier
    reader, writer = await asyncio.open_connection(host, port)
    said = b""
    try:
        if kept_alive:
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200 ")
            await reader.readuntil(b"}")  # the small JSON body
            started = time.monotonic()
        if lines:
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        while time.monotonic() - started < TRICKLE:
            try:
                chunk = await asyncio.wait_for(reader.read(4096), 0.3)
            except TimeoutError:
                if lines:
                    writer.write(b"X-Slow: one more line\r\n")
                    await writer.drain()
                continue
            if not chunk:
                return time.monotonic() - started, said
            said += chunk
        return float("inf"), said
    except ConnectionError:
        return time.monotonic() - started, said
    finally:
        writer.close()


async def _stream_lasts(host: str, port: int) -> float:
    """How long an event stream asked to last 2.5 s was served (it outlives the header deadline)."""
    started = time.monotonic()
    async with httpx.AsyncClient(timeout=30) as client:
        response = await client.get(f"http://{host}:{port}/api/v1/events/stream", params={"close_after": 2.5})
    assert response.status_code == 200
    return time.monotonic() - started


def test_slow_clients_are_closed_at_the_header_deadline_while_requests_are_answered(
    served: tuple[str, int],
) -> None:
    host, port = served

    async def main() -> tuple[list[tuple[float, bytes]], list[int], float]:
        clients = [asyncio.create_task(_slow_client(host, port, lines=True)) for _ in range(SLOW_CLIENTS)]
        clients.append(asyncio.create_task(_slow_client(host, port, lines=True, kept_alive=True)))
        clients.append(asyncio.create_task(_slow_client(host, port, lines=False)))
        stream = asyncio.create_task(_stream_lasts(host, port))
        answers = []
        async with httpx.AsyncClient(timeout=10) as client:
            for _ in range(5):  # an ordinary request, while the slow ones trickle
                await asyncio.sleep(0.2)
                answers.append((await client.get(f"http://{host}:{port}/healthz")).status_code)
        return await asyncio.gather(*clients), answers, await stream

    closed, answers, streamed = asyncio.run(main())
    assert answers == [200] * 5
    late = [seconds for seconds, _ in closed if not seconds <= TIMEOUT + SLACK]
    assert not late, f"{len(late)} slow clients were not closed within {TIMEOUT + SLACK}s: {late[:5]}"
    assert all(said.startswith(b"HTTP/1.1 408 ") for _, said in closed[:-1])  # a partial request is told
    assert closed[-1][1] == b""  # one that sent nothing is closed without an answer
    assert streamed >= 2.5  # a response is not cut by the deadline


async def _slow_body(host: str, port: int) -> tuple[float, bytes]:
    """Seconds until the server answered a submit whose declared body trickles a byte every 0.3 s."""
    reader, writer = await asyncio.open_connection(host, port)
    started = time.monotonic()
    writer.write(
        b"POST /api/v1/runs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Content-Length: 200\r\n\r\n{"
    )
    try:
        while time.monotonic() - started < TRICKLE:
            try:
                said = await asyncio.wait_for(reader.read(4096), 0.3)
            except TimeoutError:
                writer.write(b" ")
                await writer.drain()
                continue
            answered = time.monotonic() - started
            return answered, said + await _rest_of_answer(reader, said)
        return float("inf"), b""
    finally:
        writer.close()


async def _rest_of_answer(reader: asyncio.StreamReader, said: bytes) -> bytes:
    """The bytes of an answer still to come: its head and body may arrive in separate segments."""
    rest = b""
    while b"\r\n\r\n" not in said + rest:
        more = await asyncio.wait_for(reader.read(4096), 5)
        if not more:
            return rest
        rest += more
    head, _, body = (said + rest).partition(b"\r\n\r\n")
    length = next(
        (int(line.split(b":", 1)[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")),
        0,
    )
    if len(body) < length:
        rest += await asyncio.wait_for(reader.readexactly(length - len(body)), 5)
    return rest


def test_a_body_that_trickles_is_answered_408_at_its_deadline(served: tuple[str, int]) -> None:
    seconds, said = asyncio.run(_slow_body(*served))
    assert seconds <= TIMEOUT + SLACK, f"the trickled body was still read after {seconds}s"
    assert said.startswith(b"HTTP/1.1 408 "), said[:200]
    assert b"TIDEGATE_BODY_TIMEOUT" in said
