"""HTTP submit: `POST /api/v1/runs` with 8 concurrent clients against one `tidegate serve`, and the 429 path.

    python benchmarks/http_submit.py [--runs 5000] [--repeat 3] [--backends sqlite,postgres] [--rejections 2000]

Per backend, the median over --repeat fresh databases of:
- HTTP submit: --runs runs, one per request, from --clients concurrent
  clients (threads, each with its own keep-alive connection) to one
  `tidegate serve` process on 127.0.0.1 (a subprocess on a free port):
  requests/s over the whole batch, p50 and p99 latency per request;
- the Python single submit, measured in the same run (`task.submit()` one run
  per call, in this process, on the same database), and the ratio
  HTTP / Python (aim: >= 0.5);
- with the `flood` queue at its `max_active` ceiling, --rejections requests
  from the same clients, every one answered 429: p50 and p99 latency of a
  rejection (aim: p99 < 10 ms);
- where the time goes: the p50 latency of one client alone (no
  concurrency) for a submit, a 429 and `GET /healthz` (no store call: the
  HTTP stack's own floor), SEQUENTIAL requests each.
No worker runs: runs stay queued, so only the submit and admission paths are measured.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
from rich.console import Console
from rich.table import Table

import tidegate
from common import fresh_database, measured_with, medians, parse_options, repeated, write_markdown
from http_apps import CEILING
from limits_apps import percentile

HERE = Path(__file__).parent
APP = "http_apps:app"
SEQUENTIAL = 300  # requests of the one-client figures
console = Console()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def served(url: str) -> Iterator[str]:
    """`tidegate serve http_apps:app` on a free loopback port; its base URL; SIGTERM after."""
    port = _free_port()
    env = {
        **{key: value for key, value in os.environ.items() if not key.startswith("TIDEGATE_API_")},
        "TIDEGATE_DATABASE": url,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")])),
    }
    command = [sys.executable, "-m", "tidegate", "serve", APP, "--port", str(port), "--database", url]
    process = subprocess.Popen(command, cwd=HERE, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"tidegate serve did not start (exit code {process.poll()})")
            try:
                if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.05)
        yield base
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)


def post_concurrently(
    base: str, body: dict[str, object], total: int, clients: int, expected: int
) -> tuple[float, list[float]]:
    """`total` POSTs of `body` split over `clients` threads: (wall seconds, every request's latency)."""
    latencies: list[list[float]] = [[] for _ in range(clients)]
    failures: list[str] = []
    start = threading.Barrier(clients + 1)

    def client(index: int) -> None:
        count = total // clients + (index < total % clients)
        with httpx.Client(base_url=base, timeout=30) as session:
            session.get("/healthz")  # open the keep-alive connection before the clock starts
            start.wait()
            for _ in range(count):
                began = time.perf_counter()
                response = session.post("/api/v1/runs", json=body)
                latencies[index].append(time.perf_counter() - began)
                if response.status_code != expected:
                    failures.append(f"{response.status_code} {response.text[:200]}")

    threads = [threading.Thread(target=client, args=(index,)) for index in range(clients)]
    for thread in threads:
        thread.start()
    start.wait()
    began = time.perf_counter()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - began
    if failures:
        raise SystemExit(f"{len(failures)} answers were not {expected}, e.g. {failures[0]}")
    return elapsed, [latency for found in latencies for latency in found]


def one_client_p50(base: str, method: str, path: str, body: dict[str, object] | None, expected: int) -> float:
    """p50 latency of SEQUENTIAL requests from one client, nothing else in flight."""
    latencies = []
    with httpx.Client(base_url=base, timeout=30) as session:
        session.get("/healthz")
        for _ in range(SEQUENTIAL):
            began = time.perf_counter()
            response = session.request(method, path, json=body)
            latencies.append(time.perf_counter() - began)
            if response.status_code != expected:
                raise SystemExit(f"{method} {path}: {response.status_code} {response.text[:200]}")
    return percentile(latencies, 0.5)


def python_single_rate(url: str, runs: int) -> float:
    """Runs/s of `task.submit()`, one run per call, in this process."""
    app = tidegate.App(url)
    app.queue("http")
    task = app.task(name="http_noop", queue="http")(lambda: None)
    try:
        task.submit()  # registers the declarations: not part of the figure
        started = time.perf_counter()
        for _ in range(runs):
            task.submit()
        return runs / (time.perf_counter() - started)
    finally:
        app.close()


def fill_flood(url: str) -> None:
    """The flood queue at its ceiling: every further submit is refused."""
    app = tidegate.App(url)
    app.queue("flood", max_active=CEILING)
    task = app.task(name="flood_noop", queue="flood")(lambda: None)
    try:
        task.submit_many([{}] * CEILING)
    finally:
        app.close()


def measure(backend: str, runs: int, clients: int, rejections: int) -> dict[str, float]:
    with fresh_database(backend) as url:
        with tidegate.App(url) as app:
            app.store.migrate()  # before the server starts: it and the clients find the schema ready
        with served(url) as base:
            elapsed, latencies = post_concurrently(base, {"task": "http_noop", "args": {}}, runs, clients, 201)
            python_rate = python_single_rate(url, min(runs, 2000))
            alone = {
                "alone_healthz": one_client_p50(base, "GET", "/healthz", None, 200),
                "alone_submit": one_client_p50(base, "POST", "/api/v1/runs", {"task": "http_noop", "args": {}}, 201),
            }
            fill_flood(url)
            _, rejected = post_concurrently(base, {"task": "flood_noop", "args": {}}, rejections, clients, 429)
            alone["alone_429"] = one_client_p50(base, "POST", "/api/v1/runs", {"task": "flood_noop", "args": {}}, 429)
    http_rate = runs / elapsed
    return {
        "http_rate": http_rate,
        "http_p50": percentile(latencies, 0.5),
        "http_p99": percentile(latencies, 0.99),
        "python_rate": python_rate,
        "ratio": http_rate / python_rate,
        "reject_p50": percentile(rejected, 0.5),
        "reject_p99": percentile(rejected, 0.99),
        **alone,
    }


def main() -> None:
    def extra(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--clients", type=int, default=8)
        parser.add_argument("--rejections", type=int, default=2000)

    options = parse_options(__doc__, runs=5000, extra=extra)
    samples = repeated(
        options.backends,
        options.repeat,
        lambda backend: measure(backend, options.runs, options.clients, options.rejections),
        console,
    )
    results = {backend: medians(found) for backend, found in samples.items()}

    def ms(value: float) -> str:
        return f"{value * 1000:.2f} ms"

    header = [
        "backend",
        "HTTP submit/s",
        "HTTP p50",
        "HTTP p99",
        "Python single submit/s",
        "HTTP / Python (aim >= 0.5)",
        "429 p50",
        "429 p99 (aim < 10 ms)",
        "1 client p50: submit / 429 / healthz",
    ]
    rows = [
        [
            backend,
            f"{f['http_rate']:,.0f}",
            ms(f["http_p50"]),
            ms(f["http_p99"]),
            f"{f['python_rate']:,.0f}",
            f"{f['ratio']:.2f}",
            ms(f["reject_p50"]),
            ms(f["reject_p99"]),
            f"{ms(f['alone_submit'])} / {ms(f['alone_429'])} / {ms(f['alone_healthz'])}",
        ]
        for backend, f in results.items()
    ]
    title = f"HTTP submit, {options.runs:,} runs from {options.clients} clients, median of {options.repeat}"
    table = Table(title=title)
    for column in header:
        table.add_column(column, justify="left" if column == "backend" else "right")
    for row in rows:
        table.add_row(*row)
    console.print(table)
    command = f"python benchmarks/http_submit.py --runs {options.runs} --repeat {options.repeat}"
    path = write_markdown(
        "http_submit",
        title,
        header,
        rows,
        [
            measured_with(command),
            f"One `tidegate serve` process (uvicorn, loopback) and {options.clients} client threads in the "
            "benchmark's process, on the same machine: the clients' CPU is the server's competition. "
            "Requests/s is --runs over the wall time from the first request to the last answer; latencies "
            "per request, p99 nearest-rank. The Python single submit is `task.submit()` one run per call "
            f"(min(--runs, 2000) calls) in the benchmark's process, on the same database, in the same run. "
            f"The 429 figures are {options.rejections:,} POSTs to the `flood` queue once it holds its "
            "`max_active` ceiling of queued runs: each is counted against the ceiling in the store and refused. "
            f"The one-client p50s are {SEQUENTIAL} sequential requests with nothing else in flight: `/healthz` "
            "calls no store, so it is the HTTP stack's own cost (uvicorn, FastAPI, the client), which every "
            "figure above includes.",
        ],
    )
    console.print(f"[dim]wrote {path}[/]")


if __name__ == "__main__":
    main()
