"""Where one `POST /api/v1/runs` spends its time: a profile of a `tidegate serve` process.

    python benchmarks/http_profile.py [--backends sqlite,postgres] [--requests 3000] [--clients 8]

Twice per backend, with the clients of http_submit.py: submits that are
stored (201), then submits refused past an admission ceiling (429). For each:

- CPU per request of the server process and of the client process (the
  benchmark's own threads), from /proc: on a shared machine this says which
  side the wall time is spent on;
- a deterministic profile (cProfile) of every thread of the server: a
  request crosses the event loop thread and worker threads (the store call
  in the thread pool), and cProfile only sees the thread that enabled it, so
  each thread enables its own as it starts (`threading.setprofile`) and they
  are merged. Figures are cumulative microseconds per request, profiler
  overhead included (it inflates small Python calls more than C and I/O), so
  read them as shares, not as latencies.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import signal
import threading
from pathlib import Path
from typing import Any

import tidegate
from common import fresh_database
from http_submit import PROFILE_MARK, fill_flood, post_concurrently, served

HERE = Path(__file__).parent

# Functions whose cumulative time answers "where does a request go" (file fragment, function).
SPANS = [
    ("whole request in the ASGI app (middleware in)", "starlette/applications.py", "__call__"),
    ("middleware: request timing", "api/timing.py", "__call__"),
    ("middleware: body limit", "api/bodies.py", "__call__"),
    ("FastAPI: read + parse the body", "fastapi/routing.py", "_extract_request_body"),
    ("FastAPI: dependencies (tokens, JSON type)", "fastapi/dependencies/utils.py", "solve_dependencies"),
    ("pydantic: validate the body", "fastapi/dependencies/utils.py", "request_body_to_args"),
    ("route: submit_run", "api/runs.py", "submit_run"),
    ("FastAPI: response model validate + JSON", "fastapi/routing.py", "serialize_response"),
    ("429: exception handler + JSON", "api/errors.py", "_on_tidegate"),
    ("worker thread: store_each (build + store)", "api/submission.py", "store_each"),
    ("build: checks + NewRun", "api/submission.py", "_build"),
    ("app.enqueue: registry.persist", "app/registry.py", "persist"),
    ("store: enqueue (transaction)", "storage/shared/facade.py", "enqueue"),
    ("store: admission ceiling count", "sqlite/runs.py", "check_admission"),
    ("HTTP parsing + writing (uvicorn)", "uvicorn/protocols/http/httptools_impl.py", "data_received"),
]


SUMMARY = (
    "CPU per request is the server process's and the client threads' CPU time over the phase, from /proc, "
    "in a run without the profiler; the spans are cProfile's cumulative wall time per request, profiler "
    "included, so on a loaded machine they also hold the time a thread waited for a core (notably in the "
    "socket write that wakes the client). Nested spans are included in their parents."
)


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def serve_profiled(url: str, port: int, out: str) -> None:
    """The server side: `tidegate serve http_apps:app` in this process, every thread profiled."""
    import uvicorn

    from tidegate.api import create_api
    from tidegate.cli.loading import load_app_for

    profiles: list[cProfile.Profile] = []

    def start_profiling(*_: Any) -> None:  # the first event of a new thread: from then on, its own profile
        profile = cProfile.Profile()
        profiles.append(profile)
        profile.enable()

    api = create_api(load_app_for("http_apps:app", url), owns_app=True)
    threading.setprofile(start_profiling)
    main = cProfile.Profile()
    profiles.append(main)
    # uvicorn re-raises the SIGTERM it stopped on, once its own handler is gone: this one lets us write.
    signal.signal(signal.SIGTERM, lambda *_: None)
    main.enable()
    uvicorn.run(api, host="127.0.0.1", port=port, log_level="warning", server_header=False)
    main.disable()
    threading.setprofile(None)
    stats = pstats.Stats(main)
    for profile in profiles[1:]:
        stats.add(profile)
    stats.dump_stats(out)


def report(title: str, out: str, requests: int, server_cpu: float, client_cpu: float) -> list[str]:
    loaded: Any = pstats.Stats(out)
    stats = loaded.stats  # {(file, line, function): (calls, primitive calls, own time, cumulative, callers)}
    lines = [f"### {title}", "", f"CPU per request: server {1e6 * server_cpu / requests:,.0f} µs, "
             f"clients {1e6 * client_cpu / requests:,.0f} µs (unprofiled runs of the same phase)", "",
             "| span | µs per request (profiled) |", "|---|---|"]  # fmt: skip
    for label, file_part, function in SPANS:
        total = sum(
            cumulative
            for (file, _, name), (_, _, _, cumulative, _) in stats.items()
            if name == function and file.endswith(file_part)
        )
        lines.append(f"| {label} | {1e6 * total / requests:,.0f} |")
    return [*lines, ""]


def cpu_phase(url: str, body: dict[str, object], requests: int, clients: int, expected: int) -> tuple[float, float]:
    """Server and client CPU seconds of one phase, without the profiler."""
    with served(url) as (base, pid):
        server, client = _cpu_seconds(pid), _cpu_seconds(os.getpid())
        post_concurrently(base, body, requests, clients, expected)
        return _cpu_seconds(pid) - server, _cpu_seconds(os.getpid()) - client


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--serve", nargs=3, metavar=("URL", "PORT", "OUT"), help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.serve:
        serve_profiled(options.serve[0], int(options.serve[1]), options.serve[2])
        return
    lines: list[str] = []
    for backend in options.backends.split(","):
        with fresh_database(backend) as url:
            with tidegate.App(url) as app:
                app.store.migrate()
            phases: list[tuple[str, dict[str, object], int]] = [
                ("201", {"task": "http_noop", "args": {}}, 201),
                ("429", {"task": "flood_noop", "args": {}}, 429),
            ]
            for phase, body, expected in phases:
                if expected == 429:
                    fill_flood(url)
                server_cpu, client_cpu = cpu_phase(url, body, options.requests, options.clients, expected)
                out = f"/tmp/tidegate-profile-{os.getpid()}-{backend}-{phase}.prof"
                with served(url, profile_to=out) as (base, _):
                    post_concurrently(base, body, options.requests, options.clients, expected)
                title = f"{backend}: POST /api/v1/runs answered {phase}"
                lines += report(title, out, options.requests, server_cpu, client_cpu)
    print("\n".join(lines))
    write_section(lines, options)


def write_section(lines: list[str], options: argparse.Namespace) -> None:
    """The tables into results/http_submit.md, after its own table (replacing an older profile)."""
    path = HERE / "results" / "http_submit.md"
    text = path.read_text() if path.exists() else ""
    kept = text[: text.index(PROFILE_MARK)] if PROFILE_MARK in text else text
    command = f"python benchmarks/http_profile.py --requests {options.requests} --clients {options.clients}"
    section = [PROFILE_MARK, "", f"Measured with `{command}`. {SUMMARY}", "", *lines]
    path.write_text(kept.rstrip() + "\n\n" + "\n".join(section).rstrip() + "\n")


if __name__ == "__main__":
    main()
