"""HTTP submit: `POST /api/v1/runs` with 8 concurrent clients against one `tidegate serve`, and the 429 path.

    python benchmarks/http_submit.py [--runs 5000] [--repeat 3] [--backends sqlite,postgres] [--rejections 2000]

Per backend, the median over --repeat fresh databases of:
- HTTP submit: --runs runs, one per request, from --clients concurrent
  clients (threads, each with its own keep-alive `http.client` connection) to one
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
import http.client
import json
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
from urllib.parse import urlsplit

from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console

import tidegate
from common import fresh_database, measured_with, medians, parse_options, print_table, repeated, write_markdown
from http_apps import CEILING
from limits_apps import percentile

HERE = Path(__file__).parent
APP = "http_apps:app"
SEQUENTIAL = 300  # requests of the one-client figures
PROFILE_MARK = "## Where one request's time goes"  # the section http_profile.py writes; kept across runs
console = Console()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def served(url: str, profile_to: str | None = None) -> Iterator[tuple[str, int]]:
    """`tidegate serve http_apps:app` on a free loopback port; its base URL and pid; SIGTERM after.

    `profile_to`: the same server sampled by http_profile.py, which writes its counts there on exit.
    """
    port = _free_port()
    env = {
        **{key: value for key, value in os.environ.items() if not key.startswith("TIDEGATE_API_")},
        "TIDEGATE_DATABASE": url,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")])),
    }
    command = [sys.executable, "-m", "tidegate", "serve", APP, "--port", str(port), "--database", url]
    if profile_to is not None:
        command = [sys.executable, str(HERE / "http_profile.py"), "--serve", url, str(port), profile_to]
    process = subprocess.Popen(command, cwd=HERE, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"tidegate serve did not start (exit code {process.poll()})")
            try:
                if Session(base).request("GET", "/healthz")[0] == 200:
                    break
            except OSError:
                time.sleep(0.05)
        yield base, process.pid
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)


class Session:
    """One keep-alive connection of the stdlib's `http.client`.

    The clients share this process (and its GIL) and the machine with the
    server: httpx spent several times the CPU per request that http.client does,
    which the server's figures then paid for. Measured with httpx until 2026-11-24.
    """

    def __init__(self, base: str) -> None:
        where = urlsplit(base)
        self._connection = http.client.HTTPConnection(where.hostname or "127.0.0.1", where.port, timeout=30)

    def request(self, method: str, path: str, body: dict[str, object] | None = None) -> tuple[int, bytes]:
        payload = None if body is None else json.dumps(body).encode()
        headers = {} if payload is None else {"Content-Type": "application/json"}
        self._connection.request(method, path, body=payload, headers=headers)
        response = self._connection.getresponse()
        return response.status, response.read()

    def close(self) -> None:
        self._connection.close()


@contextmanager
def session(base: str) -> Iterator[Session]:
    opened = Session(base)
    try:
        opened.request("GET", "/healthz")  # open the keep-alive connection before the clock starts
        yield opened
    finally:
        opened.close()


def post_concurrently(
    base: str,
    body: dict[str, object] | None,
    total: int,
    clients: int,
    expected: int,
    method: str = "POST",
    path: str = "/api/v1/runs",
) -> tuple[float, list[float]]:
    """`total` requests (a POST of `body` by default) split over `clients` threads: (wall seconds, latencies)."""
    latencies: list[list[float]] = [[] for _ in range(clients)]
    failures: list[str] = []
    start = threading.Barrier(clients + 1)

    def client(index: int) -> None:
        count = total // clients + (index < total % clients)
        with session(base) as client:
            start.wait()
            for _ in range(count):
                began = time.perf_counter()
                status, text = client.request(method, path, body)
                latencies[index].append(time.perf_counter() - began)
                if status != expected:
                    failures.append(f"{status} {text[:200]!r}")

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
    with session(base) as client:
        for _ in range(SEQUENTIAL):
            began = time.perf_counter()
            status, text = client.request(method, path, body)
            latencies.append(time.perf_counter() - began)
            if status != expected:
                raise SystemExit(f"{method} {path}: {status} {text[:200]!r}")
    return percentile(latencies, 0.5)


def server_p99(base: str, status: str) -> float:
    """The p99 of the server's own time for `POST /api/v1/runs` answered `status` (its /metrics histogram:
    arrival to last byte written, no client or socket queueing), as the upper bound of its bucket."""
    with session(base) as client:
        _, text = client.request("GET", "/metrics")
    buckets = sorted(
        (float(sample.labels["le"]), sample.value)
        for family in text_string_to_metric_families(text.decode())
        for sample in family.samples
        if sample.name == "tidegate_http_request_duration_seconds_bucket"
        and sample.labels.get("route") == "/api/v1/runs"
        and sample.labels.get("status") == status
    )
    total = buckets[-1][1]
    return next(bound for bound, count in buckets if count >= 0.99 * total)


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
        with served(url) as (base, _):
            elapsed, latencies = post_concurrently(base, {"task": "http_noop", "args": {}}, runs, clients, 201)
            python_rate = python_single_rate(url, min(runs, 2000))
            alone = {
                "alone_healthz": one_client_p50(base, "GET", "/healthz", None, 200),
                "alone_submit": one_client_p50(base, "POST", "/api/v1/runs", {"task": "http_noop", "args": {}}, 201),
            }
            fill_flood(url)
            _, rejected = post_concurrently(base, {"task": "flood_noop", "args": {}}, rejections, clients, 429)
            alone["server_429_p99"] = server_p99(base, "429")
            _, floor = post_concurrently(base, None, rejections, clients, 200, method="GET", path="/healthz")
            alone["healthz_p99"] = percentile(floor, 0.99)
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


def kept_profile() -> list[str]:
    """The profile section of the results file (http_profile.py writes it), kept when the table is rewritten."""
    path = HERE / "results" / "http_submit.md"
    text = path.read_text() if path.exists() else ""
    return text[text.index(PROFILE_MARK) :].rstrip().splitlines() if PROFILE_MARK in text else []


def main() -> None:
    def extra(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--clients", type=int, default=8)
        parser.add_argument("--rejections", type=int, default=2000)

    options = parse_options(__doc__, runs=5000, extra=extra)
    load_before = os.getloadavg()
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
        "429 p99 in the server",
        "/healthz p99, same clients",
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
            f"<= {ms(f['server_429_p99'])}",
            ms(f["healthz_p99"]),
            f"{ms(f['alone_submit'])} / {ms(f['alone_429'])} / {ms(f['alone_healthz'])}",
        ]
        for backend, f in results.items()
    ]
    title = f"HTTP submit, {options.runs:,} runs from {options.clients} clients, median of {options.repeat}"
    print_table(console, title, header, rows)
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
            "per request, p99 nearest-rank. Concurrent HTTP submits share transactions (group commit, "
            "api/group_commit.py: what arrives during one store call goes in the next), which a Python "
            "`task.submit()` does not. The Python single submit is `task.submit()` one run per call "
            f"(min(--runs, 2000) calls) in the benchmark's process, on the same database, in the same run. "
            f"The 429 figures are {options.rejections:,} POSTs to the `flood` queue once it holds its "
            "`max_active` ceiling of queued runs, refused by the store or, within 50 ms of its last refusal (100 ms "
            "while one request asks it again), by the server's repeat of it (api/refusals.py). "
            "'429 p99 in the server' is read from the server's own "
            "latency histogram (/metrics: from the request's arrival to its last byte written, as a bucket bound): "
            "the rest of a client's p99 is time spent waiting for a core, on either side. '/healthz p99' is the "
            "same clients, as many requests, on the route that does nothing: the floor of any p99 in that sitting. "
            f"The one-client p50s are {SEQUENTIAL} sequential requests with nothing else in flight: `/healthz` "
            "calls no store, so it is the HTTP stack's own cost (uvicorn, FastAPI, the client), which every "
            "figure above includes.",
            "The machine is shared with other engineers' test runs (load average "
            f"{load_before[0]:.1f} / {load_before[1]:.1f} / {load_before[2]:.1f} when this sitting began): the "
            "ratio is what to compare, and the p99s carry the scheduler's noise.",
            "",
            *kept_profile(),
        ],
    )
    console.print(f"[dim]wrote {path}[/]")


if __name__ == "__main__":
    main()
